package engine

import "xrnic/transport"

// LLP is the lower layer the engine runs over, a transport.Conn: the
// kernel TCP socket of transport/kernel or a user-space TCP connection of
// transport/afxdp.
type LLP = transport.Conn

// PushLLP is a transport.PushConn (its stack calls the receive function).
type PushLLP = transport.PushConn
