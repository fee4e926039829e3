package main

import "xrnic/verbs"

// setIface hands the afxdp transport its interface.
func setIface(cfg *verbs.DeviceConfig, iface string) {
	cfg.XDP.Iface = iface
}
