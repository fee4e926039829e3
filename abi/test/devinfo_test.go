package abitest

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"xrnic/internal/netnstest"
	"xrnic/verbs"
)

// truth is what the device must report: the defaults of
// verbs.DeviceConfig, read from the Go API itself.
func truth(t *testing.T) verbs.Attributes {
	t.Helper()
	d, err := verbs.Open(verbs.DeviceConfig{})
	if err != nil {
		t.Fatalf("open a kernel-transport device for the expected attributes: %v", err)
	}
	defer d.Close()
	return d.Attributes()
}

// devinfoFields parses ibv_devinfo's "key:\tvalue" lines; the first of a
// key wins (port 1 is the only port). GID lines are collected apart.
func devinfoFields(out string) (map[string]string, []string) {
	f := map[string]string{}
	var gids []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if strings.HasPrefix(k, "GID[") {
			gids = append(gids, v)
			continue
		}
		if _, dup := f[k]; !dup {
			f[k] = v
		}
	}
	return f, gids
}

// eui64 is the modified EUI-64 of a MAC (the GUID RoCE and iWARP
// drivers derive from it).
func eui64(mac net.HardwareAddr) [8]byte {
	return [8]byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
}

// guidForms are the GUID strings ibv_devices/ibv_devinfo may print for a
// MAC: its EUI-64, or the MAC zero-padded (as siw does).
func guidForms(mac net.HardwareAddr) []string {
	e := eui64(mac)
	var p [8]byte
	copy(p[:], mac)
	f := func(b [8]byte) string {
		return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7])
	}
	return []string{f(e), f(p)}
}

// gidFromMAC tells whether a printed GID (raw hex groups, or an IPv6
// text) carries mac: as fe80::EUI-64 or with the MAC in its first bytes.
func gidFromMAC(gid string, mac net.HardwareAddr) bool {
	gid, _, _ = strings.Cut(gid, ",")
	gid = strings.TrimSpace(gid)
	ip := net.ParseIP(gid)
	if ip == nil {
		// ibv_devinfo's raw form: 8 groups of 4 hex digits.
		s := strings.ReplaceAll(gid, ":", "")
		if len(s) != 32 {
			return false
		}
		b := make([]byte, 16)
		for i := range b {
			if _, err := fmt.Sscanf(s[2*i:2*i+2], "%02x", &b[i]); err != nil {
				return false
			}
		}
		ip = net.IP(b)
	}
	e := eui64(mac)
	if string(ip[8:]) == string(e[:]) {
		return true
	}
	return string(ip[:6]) == string(mac)
}

func mtuEnum(mtu int) string {
	best := ""
	for i, m := range []int{256, 512, 1024, 2048, 4096} {
		if m <= mtu {
			best = fmt.Sprintf("%d (%d)", m, i+1)
		}
	}
	return best
}

func TestDevinfo(t *testing.T) {
	want := truth(t)
	forEachTransport(t, []string{"ibv_devices", "ibv_devinfo"}, func(t *testing.T, e *env) {
		ns, dev := e.pair.NSA, e.pair.DevA
		var mac net.HardwareAddr
		netnstest.Do(t, ns, func() {
			ifi, err := net.InterfaceByName(dev)
			if err != nil {
				t.Fatal(err)
			}
			mac = ifi.HardwareAddr
		})

		out, err := e.run(t, ns, 30*time.Second, "ibv_devices")
		if err != nil || !strings.Contains(out, "xrnic0") {
			t.Fatalf("ibv_devices: %v, want a line for xrnic0:\n%s", err, out)
		}
		// ibv_devices prints the GUID as 16 hex digits.
		guidOK := false
		for _, g := range guidForms(mac) {
			guidOK = guidOK || strings.Contains(out, strings.ReplaceAll(g, ":", ""))
		}
		if !guidOK {
			t.Errorf("ibv_devices: no node GUID from MAC %s (%v):\n%s", mac, guidForms(mac), out)
		}

		for _, mtu := range []int{1500, 2200} {
			t.Run(fmt.Sprintf("mtu%d", mtu), func(t *testing.T) {
				netnstest.IP(t, "-n", ns, "link", "set", dev, "mtu", fmt.Sprint(mtu))
				defer netnstest.IP(t, "-n", ns, "link", "set", dev, "mtu", "1500")
				out, err := e.run(t, ns, 30*time.Second, "ibv_devinfo", "-v")
				if err != nil {
					t.Fatalf("ibv_devinfo -v: %v\n%s", err, out)
				}
				f, gids := devinfoFields(out)
				check := func(key, want string) {
					t.Helper()
					if got, ok := f[key]; !ok || got != want {
						t.Errorf("ibv_devinfo -v: %s = %q, want %q", key, got, want)
					}
				}
				check("hca_id", "xrnic0")
				check("transport", "iWARP (1)")
				check("atomic_cap", "ATOMIC_GLOB (2)")
				check("phys_port_cnt", "1")
				check("max_qp", fmt.Sprint(want.MaxQPs))
				check("max_qp_wr", fmt.Sprint(want.MaxWR))
				check("max_sge", fmt.Sprint(want.MaxSGE))
				check("max_cqe", fmt.Sprint(want.MaxCQE))
				check("max_mr", fmt.Sprint(want.MaxMR))
				check("max_mr_size", fmt.Sprintf("0x%x", want.MaxMRSize))
				check("max_qp_rd_atom", fmt.Sprint(want.MaxIRD))
				check("max_qp_init_rd_atom", fmt.Sprint(want.MaxORD))
				check("state", "PORT_ACTIVE (4)")
				check("active_mtu", mtuEnum(mtu))
				check("link_layer", "Ethernet")
				check("max_msg_sz", fmt.Sprintf("0x%x", want.MaxMsgSize))
				if !strings.HasPrefix(f["fw_ver"], "xrnic") {
					t.Errorf("ibv_devinfo -v: fw_ver = %q, want xrnic <version>", f["fw_ver"])
				}
				guidOK := false
				for _, g := range guidForms(mac) {
					guidOK = guidOK || f["node_guid"] == g
				}
				if !guidOK {
					t.Errorf("ibv_devinfo -v: node_guid = %q, want one of %v (MAC %s)", f["node_guid"], guidForms(mac), mac)
				}
				// ibv_devinfo hides a GID whose bytes 8-15 are zero (a MAC
				// in bytes 0-5 only); abitest.c checks ibv_query_gid too.
				gidOK := len(gids) == 0
				for _, g := range gids {
					gidOK = gidOK || gidFromMAC(g, mac)
				}
				if !gidOK {
					t.Errorf("ibv_devinfo -v: no GID from MAC %s among %q", mac, gids)
				}
				if len(gids) == 0 {
					t.Logf("ibv_devinfo -v printed no GID (it skips GIDs with bytes 8-15 zero)")
				}
				if t.Failed() {
					t.Logf("ibv_devinfo -v output:\n%s", out)
				}
			})
		}
	})
}
