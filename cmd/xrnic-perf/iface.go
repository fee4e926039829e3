package main

import (
	"net"

	"xrnic/verbs"
)

// setIface hands the afxdp transport its interface.
func setIface(cfg *verbs.DeviceConfig, iface string) {
	cfg.XDP.Iface = iface
}

// ifaceMTU is the MTU of the interface for the banner and the JSON (0:
// none given, or not found).
func ifaceMTU(name string) int {
	if name == "" {
		return 0
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0
	}
	return ifi.MTU
}
