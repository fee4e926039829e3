package abitest

import (
	"bufio"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"xrnic/internal/netnstest"
)

// documented is what the device must report, written out from
// docs/VERBS-ABI.md ("Semantics on iWARP", the vendor ids under perftest)
// and the defaults verbs.DeviceConfig documents, not read from the code
// under test. max_mr_size is the largest Go slice (2^63-1: "any byte
// slice", verbs.Attributes.MaxMRSize).
var documented = map[string]string{
	"hca_id":              "xrnic0",
	"transport":           "iWARP (1)",
	"atomic_cap":          "ATOMIC_GLOB (2)",
	"phys_port_cnt":       "1",
	"vendor_id":           "0x78726e",
	"vendor_part_id":      "0",
	"max_qp":              "1024",
	"max_qp_wr":           "4096",
	"max_sge":             "16",
	"max_cqe":             "4194304",
	"max_mr":              "65536",
	"max_mr_size":         "0x7fffffffffffffff",
	"max_qp_rd_atom":      "128", // IRD
	"max_qp_init_rd_atom": "128", // ORD
	"max_msg_sz":          "0x40000000",
	"state":               "PORT_ACTIVE (4)",
	"link_layer":          "Ethernet",
}

// macGID is the GID docs/VERBS-ABI.md gives the device: the MAC in the
// first 6 bytes, zeros after, as iWARP devices have.
func macGID(mac net.HardwareAddr) net.IP {
	gid := make(net.IP, net.IPv6len)
	copy(gid, mac)
	return gid
}

// macGUID is the node GUID docs/VERBS-ABI.md gives the device, the MAC
// followed by two zero bytes, in ibv_devinfo's xxxx:xxxx:xxxx:xxxx form.
func macGUID(mac net.HardwareAddr) string {
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:0000", mac[0], mac[1], mac[2], mac[3], mac[4], mac[5])
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
	forEachTransport(t, []string{"ibv_devices", "ibv_devinfo", "ibv_rc_pingpong"}, func(t *testing.T, e *env) {
		ns, dev := e.pair.NSA, e.pair.DevA
		var mac net.HardwareAddr
		netnstest.Do(t, ns, func() {
			ifi, err := net.InterfaceByName(dev)
			if err != nil {
				t.Fatal(err)
			}
			mac = ifi.HardwareAddr
		})
		if len(mac) != 6 {
			t.Fatalf("%s: MAC %q, want 6 bytes", dev, mac)
		}
		guid := macGUID(mac)

		out, err := e.run(t, ns, 30*time.Second, "ibv_devices")
		if err != nil {
			t.Fatalf("ibv_devices: %v\n%s", err, out)
		}
		// ibv_devices prints "name guid" with the GUID as 16 hex digits.
		want := []string{"xrnic0", strings.ReplaceAll(guid, ":", "")}
		found := false
		for _, l := range strings.Split(out, "\n") {
			found = found || slices.Equal(strings.Fields(l), want)
		}
		if !found {
			t.Errorf("ibv_devices: no line %q (MAC %s):\n%s", want, mac, out)
		}

		// ibv_devinfo hides every GID whose bytes 8-15 are zero (its
		// null_gid), so the documented GID is never in its output; Debian's
		// ibv_rc_pingpong prints GID index 0 (ibv_query_gid, inet_ntop)
		// before it waits for a peer.
		t.Run("gid", func(t *testing.T) {
			p := e.start(t, ns, 30*time.Second, nil, "ibv_rc_pingpong", "-d", "xrnic0", "-g", "0", "-p", fmt.Sprint(e.nextPort()))
			if !p.waitFor("local address:", 15*time.Second) {
				t.Fatalf("ibv_rc_pingpong printed no local address line\n%s", p.describe())
			}
			p.cancel()
			<-p.done
			var gid string
			for _, l := range strings.Split(p.out.String(), "\n") {
				if _, a, ok := strings.Cut(l, "local address:"); ok {
					_, gid, _ = strings.Cut(a, "GID ")
				}
			}
			got := net.ParseIP(strings.TrimSpace(gid))
			if want := macGID(mac); !got.Equal(want) {
				t.Errorf("ibv_rc_pingpong: GID %q, want %s (the MAC %s, then zeros)\n%s", gid, want, mac, p.describe())
			}
		})

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
				for _, k := range slices.Sorted(maps.Keys(documented)) {
					check(k, documented[k])
				}
				check("active_mtu", mtuEnum(mtu))
				check("node_guid", guid)
				if !strings.HasPrefix(f["fw_ver"], "xrnic ") {
					t.Errorf("ibv_devinfo -v: fw_ver = %q, want xrnic <version>", f["fw_ver"])
				}
				// The documented GID has a zero lower half: a GID line
				// here means the GID is not the MAC followed by zeros.
				if len(gids) != 0 {
					t.Errorf("ibv_devinfo -v: GIDs %q, want none (GID %s has bytes 8-15 zero)", gids, macGID(mac))
				}
				if t.Failed() {
					t.Logf("ibv_devinfo -v output:\n%s", out)
				}
			})
		}
	})
}
