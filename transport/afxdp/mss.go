package afxdp

import (
	"xrnic/transport"
	"xrnic/wire/ipv4"
	"xrnic/wire/tcp"
)

var _ transport.MSSAdvertiser = (*xconn)(nil)

// AdvertisedMSS is the MSS our stack advertises (the MTU less the IPv4
// and TCP headers): no segment of the peer's is longer.
func (x *xconn) AdvertisedMSS() int { return x.q.x.mtu - ipv4.MinHeaderLen - tcp.MinHeaderLen }
