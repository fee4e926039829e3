package validate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Files checked, relative to this directory.
const (
	manifestFile   = "../daemonset.yaml"
	dockerfile     = "../../Dockerfile"
	unitFile       = "../../systemd/xrnicd.service"
	mainModuleRoot = "../../.."
)

// object is one decoded document of a manifest.
type object struct {
	file string
	doc  int // 1-based
	meta metav1.TypeMeta
	obj  any // *corev1.Namespace, *corev1.ConfigMap, *appsv1.DaemonSet, ...
}

func (o object) String() string {
	return fmt.Sprintf("%s document %d (%s)", o.file, o.doc, o.meta.Kind)
}

// newObject is the typed object of a document's apiVersion and kind; a
// kind the manifests do not ship is an error, so that a new one gets
// checked here too.
func newObject(tm metav1.TypeMeta) (any, error) {
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		return &corev1.Namespace{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "apps/v1 DaemonSet":
		return &appsv1.DaemonSet{}, nil
	case "scheduling.k8s.io/v1 PriorityClass":
		return &schedulingv1.PriorityClass{}, nil
	}
	return nil, fmt.Errorf("apiVersion %q kind %q: not a kind this validator knows; add it to newObject", tm.APIVersion, tm.Kind)
}

// decodeStrict decodes one YAML document into its typed object: duplicate
// keys, fields the type lacks and fields in the wrong case are errors (the
// API server's strict field validation; encoding/json alone would accept
// "HostNetwork" for hostNetwork).
func decodeStrict(doc []byte) (metav1.TypeMeta, any, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return metav1.TypeMeta{}, nil, err
	}
	var tm metav1.TypeMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		return tm, nil, err
	}
	obj, err := newObject(tm)
	if err != nil {
		return tm, nil, err
	}
	strict, err := sigsjson.UnmarshalStrict(js, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return tm, nil, err
	}
	if len(strict) > 0 {
		return tm, nil, errors.Join(strict...)
	}
	return tm, obj, nil
}

// readManifest splits file into its YAML documents and decodes each.
func readManifest(t *testing.T, file string) []object {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var objs []object
	for n := 1; ; n++ {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", file, n, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			n--
			continue
		}
		tm, obj, err := decodeStrict(doc)
		if err != nil {
			t.Fatalf("%s: document %d: %v", file, n, err)
		}
		objs = append(objs, object{file: file, doc: n, meta: tm, obj: obj})
	}
	if len(objs) == 0 {
		t.Fatalf("%s: no documents", file)
	}
	return objs
}

// stripComments drops comment-only lines (a document of comments alone is
// empty).
func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out
}

// TestStrictDecodingRejects: the decoder fails on what a lax one would
// let through, so that the manifest checks below rest on typed fields.
func TestStrictDecodingRejects(t *testing.T) {
	const ds = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n"
	for name, doc := range map[string]string{
		"unknown field":   ds + "      hostNetwrk: true\n",
		"wrong case":      ds + "      HostNetwork: true\n",
		"duplicate field": ds + "      hostNetwork: true\n      hostNetwork: false\n",
		"wrong type":      ds + "      hostNetwork: \"yes\"\n",
		"unknown kind":    "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
		"unknown version": "apiVersion: apps/v1beta2\nkind: DaemonSet\nmetadata: {name: x}\n",
	} {
		if _, _, err := decodeStrict([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error:\n%s", name, doc)
		}
	}
	_, obj, err := decodeStrict([]byte(ds + "      hostNetwork: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !obj.(*appsv1.DaemonSet).Spec.Template.Spec.HostNetwork {
		t.Error("hostNetwork: true decoded as false")
	}
}

// unitCapabilities is AmbientCapabilities of the systemd unit, without
// the CAP_ prefix (the form of a container's capabilities), and whether
// CapabilityBoundingSet is the same set.
func unitCapabilities(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	sets := map[string][]string{}
	for _, l := range strings.Split(string(b), "\n") {
		for _, key := range []string{"AmbientCapabilities=", "CapabilityBoundingSet="} {
			if v, ok := strings.CutPrefix(l, key); ok {
				for _, c := range strings.Fields(v) {
					sets[key] = append(sets[key], strings.TrimPrefix(c, "CAP_"))
				}
			}
		}
	}
	ambient := sets["AmbientCapabilities="]
	if len(ambient) == 0 {
		t.Fatalf("%s: no AmbientCapabilities line", unitFile)
	}
	slices.Sort(ambient)
	return ambient
}

// dockerImage is what deploy/Dockerfile documents and builds: the tag
// (its "# image:" line), the build and runtime stages, the runtime user
// and entrypoint.
type dockerImage struct {
	tag        string
	froms      []string // image of each FROM, in order
	buildRuns  []string // RUN instructions of the first stage, continuations joined
	finalUser  string
	entrypoint []string
	finalCopy  []string // COPY instructions of the last stage
}

func readDockerfile(t *testing.T) dockerImage {
	t.Helper()
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	var d dockerImage
	var instr []string
	cur := ""
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "# image: "); ok {
			d.tag = strings.TrimSpace(v)
			continue
		}
		if s := strings.TrimSpace(l); s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		cur += strings.TrimSpace(l)
		if strings.HasSuffix(cur, "\\") {
			cur = strings.TrimSuffix(cur, "\\") + " "
			continue
		}
		instr = append(instr, cur)
		cur = ""
	}
	for _, in := range instr {
		op, arg, _ := strings.Cut(in, " ")
		switch strings.ToUpper(op) {
		case "FROM":
			d.froms = append(d.froms, strings.Fields(arg)[0])
			d.finalUser, d.finalCopy = "", nil
		case "RUN":
			if len(d.froms) == 1 {
				d.buildRuns = append(d.buildRuns, arg)
			}
		case "USER":
			d.finalUser = arg
		case "COPY":
			d.finalCopy = append(d.finalCopy, arg)
		case "ENTRYPOINT":
			if err := yaml.Unmarshal([]byte(arg), &d.entrypoint); err != nil {
				t.Fatalf("%s: ENTRYPOINT %s: want the exec form: %v", dockerfile, arg, err)
			}
		}
	}
	if d.tag == "" {
		t.Fatalf("%s: no \"# image: NAME:TAG\" line documenting the tag", dockerfile)
	}
	return d
}

// TestDockerfile: a multi-stage build of ./cmd/xrnicd with Go 1.26,
// static (CGO_ENABLED=0, -trimpath), into a distroless static or Debian
// slim runtime that runs as a user that is not root.
func TestDockerfile(t *testing.T) {
	d := readDockerfile(t)
	if len(d.froms) < 2 {
		t.Fatalf("%s: %d stages, want a build and a runtime stage", dockerfile, len(d.froms))
	}
	if d.froms[0] != "golang:1.26" && !strings.HasPrefix(d.froms[0], "golang:1.26-") && !strings.HasPrefix(d.froms[0], "golang:1.26.") {
		t.Errorf("build stage FROM %s, want golang:1.26 (go.mod's Go)", d.froms[0])
	}
	run := strings.Join(d.buildRuns, "\n")
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/xrnicd", "go build"} {
		if !strings.Contains(run, want) {
			t.Errorf("build stage RUNs lack %q:\n%s", want, run)
		}
	}
	final := d.froms[len(d.froms)-1]
	if !strings.HasPrefix(final, "gcr.io/distroless/static") && !(strings.HasPrefix(final, "debian:") && strings.Contains(final, "-slim")) {
		t.Errorf("runtime stage FROM %s, want gcr.io/distroless/static* or debian:*-slim", final)
	}
	if u, _, _ := strings.Cut(d.finalUser, ":"); u == "" || u == "0" || u == "root" {
		t.Errorf("runtime stage USER %q, want a user that is not root", d.finalUser)
	}
	if len(d.entrypoint) == 0 || path.Base(d.entrypoint[0]) != "xrnicd" {
		t.Errorf("ENTRYPOINT %q, want the xrnicd binary", d.entrypoint)
	} else if !slices.ContainsFunc(d.finalCopy, func(c string) bool {
		f := strings.Fields(c)
		dst := f[len(f)-1]
		return strings.Contains(c, "xrnicd") && (dst == d.entrypoint[0] || strings.HasSuffix(dst, "/") && dst+"xrnicd" == d.entrypoint[0])
	}) {
		t.Errorf("no COPY of xrnicd to %s in the runtime stage: %q", d.entrypoint[0], d.finalCopy)
	}
	if strings.HasSuffix(d.tag, ":latest") || !strings.Contains(path.Base(d.tag), ":") {
		t.Errorf("documented image %q: want an explicit tag, not latest", d.tag)
	}
}

// xrnicdConf is the config file the ConfigMap carries: key and values,
// as xrnicd reads it (one "key value" a line, keys repeatable, # comments).
type xrnicdConf map[string][]string

func parseConf(s string) xrnicdConf {
	c := xrnicdConf{}
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, _ := strings.Cut(l, " ")
		c[k] = append(c[k], strings.TrimSpace(v))
	}
	return c
}

// get is the last value of key (the one that wins), or def.
func (c xrnicdConf) get(key, def string) string {
	if v := c[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return def
}

// parseSize reads xrnicd's region sizes: bytes, or K, M, G (KiB, MiB, GiB).
func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}

// portOf is the port number of a HOST:PORT option.
func portOf(t *testing.T, what, hostport string) int32 {
	t.Helper()
	i := strings.LastIndex(hostport, ":")
	n, err := strconv.ParseInt(hostport[i+1:], 10, 32)
	if i < 0 || err != nil {
		t.Fatalf("%s %q: not HOST:PORT", what, hostport)
	}
	return int32(n)
}

// flagValues reads a container's args as xrnicd's flag package does:
// --k=v, -k=v, or --k v.
func flagValues(args []string) map[string][]string {
	m := map[string][]string{}
	for i := 0; i < len(args); i++ {
		a := strings.TrimLeft(args[i], "-")
		if a == args[i] {
			continue
		}
		if k, v, ok := strings.Cut(a, "="); ok {
			m[k] = append(m[k], v)
		} else if i+1 < len(args) {
			m[a] = append(m[a], args[i+1])
			i++
		}
	}
	return m
}

// tolerates reports whether one of ts tolerates the taint key:effect
// (the scheduler's rule for Exists and Equal).
func tolerates(ts []corev1.Toleration, key string, effect corev1.TaintEffect) bool {
	for _, t := range ts {
		if t.Effect != "" && t.Effect != effect {
			continue
		}
		if t.Key == "" && t.Operator == corev1.TolerationOpExists {
			return true
		}
		if t.Key == key && (t.Operator == corev1.TolerationOpExists || t.Operator == "" || t.Operator == corev1.TolerationOpEqual) {
			return true
		}
	}
	return false
}

// bpfPinningInCode reports where the main module's non-test Go code pins
// BPF objects (then a bpffs mount is needed), or "" when it pins none.
func bpfPinningInCode(t *testing.T) string {
	t.Helper()
	pin := regexp.MustCompile(`/sys/fs/bpf|\bPinPath\b|\bLoadPinned\w*\(|\.Pin\(`)
	found := ""
	err := filepath.WalkDir(mainModuleRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || p == filepath.Join(mainModuleRoot, "deploy")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if loc := pin.FindIndex(b); loc != nil && found == "" {
			found = fmt.Sprintf("%s: %s", p, b[loc[0]:loc[1]])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestDaemonSet holds deploy/kubernetes/daemonset.yaml to what xrnicd on
// the afxdp transport needs and no more.
func TestDaemonSet(t *testing.T) {
	objs := readManifest(t, manifestFile)

	var (
		namespaces []string
		configMaps = map[string]*corev1.ConfigMap{}
		priorities = map[string]*schedulingv1.PriorityClass{}
		dss        []*appsv1.DaemonSet
	)
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *corev1.Namespace:
			namespaces = append(namespaces, v.Name)
			// Pod Security admission would refuse hostNetwork and the
			// capabilities at baseline or restricted.
			if l := v.Labels["pod-security.kubernetes.io/enforce"]; l != "privileged" {
				t.Errorf("Namespace %s: label pod-security.kubernetes.io/enforce %q, want privileged (hostNetwork and the capabilities are beyond baseline)", v.Name, l)
			}
		case *corev1.ConfigMap:
			configMaps[v.Name] = v
		case *schedulingv1.PriorityClass:
			priorities[v.Name] = v
		case *appsv1.DaemonSet:
			dss = append(dss, v)
		}
	}
	if len(namespaces) != 1 {
		t.Fatalf("%d Namespaces, want one (the namespace of the objects)", len(namespaces))
	}
	ns := namespaces[0]
	for _, o := range objs {
		switch v := o.obj.(type) {
		case metav1.Object:
			_, clusterScoped := o.obj.(*corev1.Namespace)
			if _, pc := o.obj.(*schedulingv1.PriorityClass); pc {
				clusterScoped = true
			}
			if !clusterScoped && v.GetNamespace() != ns {
				t.Errorf("%s %s: namespace %q, want %q", o, v.GetName(), v.GetNamespace(), ns)
			}
		}
	}
	if len(dss) != 1 {
		t.Fatalf("%d DaemonSets, want one", len(dss))
	}
	ds := dss[0]
	pod := ds.Spec.Template.Spec

	// Selector and labels.
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || sel.Empty() {
		t.Errorf("selector %v: %v (want a non-empty selector)", ds.Spec.Selector, err)
	} else if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("selector %v does not match the template's labels %v", ds.Spec.Selector, ds.Spec.Template.Labels)
	}

	// Pod: the node's network, no token, RuntimeDefault seccomp, a node agent.
	if !pod.HostNetwork {
		t.Error("hostNetwork is not true: AF_XDP and XDP must sit on the node's NIC")
	}
	if pod.HostPID || pod.HostIPC {
		t.Error("hostPID or hostIPC: xrnicd needs neither")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken is not false: xrnicd never talks to the API server")
	}
	if pod.SecurityContext == nil || pod.SecurityContext.SeccompProfile == nil || pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod securityContext.seccompProfile is not RuntimeDefault")
	}
	if len(pod.Tolerations) == 0 {
		t.Error("no tolerations: a node agent runs on tainted nodes too")
	}
	for _, taint := range []struct {
		key    string
		effect corev1.TaintEffect
	}{
		{"node-role.kubernetes.io/control-plane", corev1.TaintEffectNoSchedule},
		{"node.kubernetes.io/not-ready", corev1.TaintEffectNoExecute},
		{"node.kubernetes.io/unreachable", corev1.TaintEffectNoExecute},
		{"node.kubernetes.io/memory-pressure", corev1.TaintEffectNoSchedule},
		{"node.kubernetes.io/unschedulable", corev1.TaintEffectNoSchedule},
	} {
		if !tolerates(pod.Tolerations, taint.key, taint.effect) {
			t.Errorf("tolerations %v do not tolerate %s:%s", pod.Tolerations, taint.key, taint.effect)
		}
	}
	switch pc := pod.PriorityClassName; {
	case pc == "system-node-critical" || pc == "system-cluster-critical":
	case priorities[pc] != nil:
		if priorities[pc].Value < 1_000_000 {
			t.Errorf("PriorityClass %s: value %d, want a high one for a node agent", pc, priorities[pc].Value)
		}
	default:
		t.Errorf("priorityClassName %q: want system-node-critical or a PriorityClass of the manifest", pc)
	}

	// The container.
	var c *corev1.Container
	for i := range pod.Containers {
		if pod.Containers[i].Name == "xrnicd" {
			c = &pod.Containers[i]
		}
	}
	if c == nil || len(pod.Containers) != 1 {
		t.Fatalf("containers %d, want the one named xrnicd", len(pod.Containers))
	}

	img := readDockerfile(t)
	if c.Image != img.tag {
		t.Errorf("image %q, want %q (the tag %s documents)", c.Image, img.tag, dockerfile)
	}
	if len(c.Command) > 0 && c.Command[0] != img.entrypoint[0] {
		t.Errorf("command %q does not run the image's xrnicd %s", c.Command, img.entrypoint[0])
	}

	// Arguments: the config file, the afxdp transport, the interface.
	flags := flagValues(c.Args)
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if got := flags["transport"]; !slices.Equal(got, []string{"afxdp"}) {
		t.Errorf("--transport %q, want afxdp (the transport the capabilities are for; fatal if it cannot attach)", got)
	}
	var iface string
	if got := flags["iface"]; len(got) != 1 {
		t.Errorf("--iface given %d times, want once", len(got))
	} else if m := regexp.MustCompile(`^\$\((\w+)\)$`).FindStringSubmatch(got[0]); m != nil {
		e, ok := env[m[1]]
		switch {
		case !ok:
			t.Errorf("--iface %s: no env %s", got[0], m[1])
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			if cm := configMaps[ref.Name]; cm == nil {
				t.Errorf("env %s: ConfigMap %q is not in the manifest", e.Name, ref.Name)
			} else if iface = cm.Data[ref.Key]; iface == "" {
				t.Errorf("env %s: ConfigMap %s has no key %q (the documented default interface)", e.Name, ref.Name, ref.Key)
			}
			if ref.Optional != nil && *ref.Optional {
				t.Errorf("env %s: optional; an absent interface must stop the pod, not start it without one", e.Name)
			}
		default:
			iface = e.Value
		}
	} else {
		iface = got[0]
	}
	if strings.ContainsAny(iface, " /\t") || iface == "lo" || (iface == "" && !t.Failed()) {
		t.Errorf("interface %q: want a NIC name such as eth0", iface)
	}

	// The config file: a key of a ConfigMap mounted where --config points.
	cfgs := flags["config"]
	if len(cfgs) != 1 {
		t.Fatalf("--config given %d times, want once", len(cfgs))
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mountOf := func(p string) (corev1.VolumeMount, bool) {
		for _, m := range c.VolumeMounts {
			if p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/") {
				return m, true
			}
		}
		return corev1.VolumeMount{}, false
	}
	var conf xrnicdConf
	cfgMount, ok := mountOf(cfgs[0])
	if !ok {
		t.Fatalf("--config %s: no volume mounted there", cfgs[0])
	}
	if v := volumes[cfgMount.Name]; v.ConfigMap == nil || configMaps[v.ConfigMap.Name] == nil {
		t.Fatalf("--config %s: volume %q is not a ConfigMap of the manifest", cfgs[0], cfgMount.Name)
	} else {
		key := strings.TrimPrefix(strings.TrimPrefix(cfgs[0], cfgMount.MountPath), "/")
		data, ok := configMaps[v.ConfigMap.Name].Data[key]
		if !ok {
			t.Fatalf("--config %s: ConfigMap %s has no key %q", cfgs[0], v.ConfigMap.Name, key)
		}
		conf = parseConf(data)
		if !cfgMount.ReadOnly {
			t.Errorf("config mount %s is not readOnly", cfgMount.MountPath)
		}
	}
	for k := range flags {
		if len(conf[k]) > 0 && k != "region" {
			t.Errorf("--%s given both in args and in the config file: keep one", k)
		}
	}

	// Ports: the container's named ports are xrnicd's, and the probes and
	// the scrape annotation use the metrics port.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
		if p.HostPort != 0 && p.HostPort != p.ContainerPort {
			t.Errorf("port %s: hostPort %d differs from containerPort %d (hostNetwork)", p.Name, p.HostPort, p.ContainerPort)
		}
	}
	metricsOpt := conf.get("metrics", ":9736")
	if metricsOpt == "off" {
		t.Fatal("config: metrics off; the probes need /readyz and /healthz")
	}
	metricsPort := portOf(t, "metrics", metricsOpt)
	if ports["metrics"] != metricsPort {
		t.Errorf("port \"metrics\" %d, xrnicd's --metrics %s", ports["metrics"], metricsOpt)
	}
	if l := conf.get("listen", ":7306"); ports["mpa"] != portOf(t, "listen", l) {
		t.Errorf("port \"mpa\" %d, xrnicd's --listen %s", ports["mpa"], l)
	}
	if a := ds.Spec.Template.Annotations["prometheus.io/port"]; a != "" && a != strconv.Itoa(int(metricsPort)) {
		t.Errorf("annotation prometheus.io/port %s, metrics port %d", a, metricsPort)
	}
	probePort := func(p intstr.IntOrString) int32 {
		if p.Type == intstr.String {
			return ports[p.StrVal]
		}
		return p.IntVal
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		paths []string
	}{
		{"readinessProbe", c.ReadinessProbe, []string{"/readyz"}},
		{"livenessProbe", c.LivenessProbe, []string{"/healthz"}},
		{"startupProbe", c.StartupProbe, []string{"/readyz", "/healthz"}},
	} {
		if pr.probe == nil {
			if pr.name != "startupProbe" {
				t.Errorf("no %s", pr.name)
			}
			continue
		}
		h := pr.probe.HTTPGet
		if h == nil {
			t.Errorf("%s is not an httpGet", pr.name)
			continue
		}
		if !slices.Contains(pr.paths, h.Path) {
			t.Errorf("%s path %q, want %v", pr.name, h.Path, pr.paths)
		}
		if got := probePort(h.Port); got != metricsPort {
			t.Errorf("%s port %s (%d), want the metrics port %d", pr.name, h.Port.String(), got, metricsPort)
		}
		// --web.config.file turns the metrics server to TLS.
		scheme := corev1.URISchemeHTTP
		if len(flags["web.config.file"]) > 0 || len(conf["web.config.file"]) > 0 {
			scheme = corev1.URISchemeHTTPS
		}
		if h.Scheme != scheme && (h.Scheme != "" || scheme != corev1.URISchemeHTTP) {
			t.Errorf("%s scheme %q, xrnicd serves %s", pr.name, h.Scheme, scheme)
		}
	}

	// Security context: exactly the unit's capabilities, nothing else.
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("container has no securityContext.capabilities")
	}
	want := unitCapabilities(t)
	var add []string
	for _, cp := range sc.Capabilities.Add {
		add = append(add, strings.TrimPrefix(string(cp), "CAP_"))
	}
	slices.Sort(add)
	if !slices.Equal(add, want) {
		t.Errorf("capabilities.add %v, want %v (AmbientCapabilities of %s)", add, want, unitFile)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities.drop %v, want [ALL]", sc.Capabilities.Drop)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged: the capabilities suffice")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container seccompProfile %s overrides RuntimeDefault", sc.SeccompProfile.Type)
	}
	// Added capabilities reach the effective set of UID 0 only: the
	// runtime sets no ambient capabilities, and the image's user is not
	// root, so the pod must say UID 0.
	uid := sc.RunAsUser
	if uid == nil && pod.SecurityContext != nil {
		uid = pod.SecurityContext.RunAsUser
	}
	if uid == nil || *uid != 0 {
		u := "unset"
		if uid != nil {
			u = strconv.FormatInt(*uid, 10)
		}
		t.Errorf("runAsUser %s: the image runs as %s, whose added capabilities would not be effective; set runAsUser: 0", u, img.finalUser)
	}

	// Mounts: the config, and the host's /run/xrnic for the control socket
	// and the owner locks; bpffs only if the code pins BPF objects.
	runDir := path.Dir(conf.get("socket", "/run/xrnic/xrnicd.sock"))
	lockDir := conf.get("lock-dir", "/run/xrnic")
	if f := flags["lock-dir"]; len(f) > 0 {
		lockDir = f[len(f)-1]
	}
	pinned := bpfPinningInCode(t)
	used := map[string]bool{}
	sawBPFFS := false
	for _, m := range c.VolumeMounts {
		used[m.Name] = true
		v, ok := volumes[m.Name]
		if !ok {
			t.Errorf("mount %s: no volume %q", m.MountPath, m.Name)
			continue
		}
		switch {
		case m.MountPath == cfgMount.MountPath:
		case m.MountPath == lockDir:
			if v.HostPath == nil || v.HostPath.Path != lockDir {
				t.Errorf("mount %s (owner locks): volume %q is not hostPath %s; every xrnic process on the node must share the locks", m.MountPath, m.Name, lockDir)
			}
			if m.ReadOnly {
				t.Errorf("mount %s is readOnly; xrnicd writes its locks and socket there", m.MountPath)
			}
		case m.MountPath == "/sys/fs/bpf" || (v.HostPath != nil && v.HostPath.Path == "/sys/fs/bpf"):
			sawBPFFS = true
			if pinned == "" {
				t.Errorf("mount %s: bpffs, but nothing is pinned (no pinning in the code); drop it", m.MountPath)
			}
		default:
			t.Errorf("mount %s (volume %q): xrnicd uses no such path; drop it or teach this test why it is needed", m.MountPath, m.Name)
		}
		if v.HostPath != nil && v.HostPath.Path == "/" {
			t.Errorf("volume %q mounts the host's root", m.Name)
		}
	}
	if pinned != "" && !sawBPFFS {
		t.Errorf("the code pins BPF objects (%s) but no bpffs is mounted at /sys/fs/bpf", pinned)
	}
	if _, ok := mountOf(runDir); !ok || runDir != lockDir {
		t.Errorf("socket directory %s: want it in the shared lock directory %s", runDir, lockDir)
	}
	for name := range volumes {
		if !used[name] {
			t.Errorf("volume %q is mounted nowhere", name)
		}
	}

	// Resources: requests and limits; hugepages that cover the regions.
	res := c.Resources
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := res.Requests[r]; !ok || q.IsZero() {
			t.Errorf("no %s request", r)
		}
	}
	if q, ok := res.Limits[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit")
	} else if req := res.Requests[corev1.ResourceMemory]; q.Cmp(req) < 0 {
		t.Errorf("memory limit %s below its request %s", q.String(), req.String())
	}
	pageSize := conf.get("page-size", "2M")
	page, err := parseSize(pageSize)
	if err != nil {
		t.Fatalf("page-size %q: %v", pageSize, err)
	}
	hpName := corev1.ResourceName(map[string]string{"2M": "hugepages-2Mi", "1G": "hugepages-1Gi"}[pageSize])
	var need int64
	for _, r := range conf["region"] {
		f := strings.Split(r, ":")
		if len(f) != 3 {
			t.Fatalf("region %q: not NAME:SIZE:ACCESS", r)
		}
		n, err := parseSize(f[1])
		if err != nil || n <= 0 {
			t.Fatalf("region %q: size: %v", r, err)
		}
		need += (n + page - 1) / page * page
	}
	hpReq, hasReq := res.Requests[hpName]
	hpLim, hasLim := res.Limits[hpName]
	switch hp := conf.get("hugepages", "prefer"); {
	case hp == "off":
		if hasReq || hasLim {
			t.Errorf("hugepages off, but %s requested", hpName)
		}
	case !hasReq || !hasLim:
		t.Errorf("hugepages %s: no %s request and limit (the pod's hugetlb limit would be 0)", hp, hpName)
	default:
		if hpReq.Cmp(hpLim) != 0 {
			t.Errorf("%s request %s != limit %s (Kubernetes requires them equal)", hpName, hpReq.String(), hpLim.String())
		}
		if hpLim.Cmp(*resource.NewQuantity(need, resource.BinarySI)) < 0 {
			t.Errorf("%s %s: the regions need %d bytes in %s pages", hpName, hpLim.String(), need, pageSize)
		}
	}
}
