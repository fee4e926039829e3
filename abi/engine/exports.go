//go:build cgo

package main

/*
#cgo CFLAGS: -I${SRCDIR}/../include
// cgo's own prototypes of exported functions cannot say const: the
// header's declarations of those with const parameters are renamed away
// here, the others are checked against cgo's.
#define xrnic_post_send xrnic_post_send_h
#define xrnic_post_recv xrnic_post_recv_h
#define xrnic_modify_srq xrnic_modify_srq_h
#define xrnic_post_srq_recv xrnic_post_srq_recv_h
#define xrnic_cm_bind xrnic_cm_bind_h
#define xrnic_cm_resolve_addr xrnic_cm_resolve_addr_h
#define xrnic_cm_connect xrnic_cm_connect_h
#define xrnic_cm_accept xrnic_cm_accept_h
#define xrnic_cm_reject xrnic_cm_reject_h
#include "xrnic_engine.h"
#undef xrnic_post_send
#undef xrnic_post_recv
#undef xrnic_modify_srq
#undef xrnic_post_srq_recv
#undef xrnic_cm_bind
#undef xrnic_cm_resolve_addr
#undef xrnic_cm_connect
#undef xrnic_cm_accept
#undef xrnic_cm_reject
*/
import "C"

import "unsafe"

func main() {}

// The Go mirrors of the header's structures must match the C compiler's
// layouts: each line fails to compile if a size differs.
var (
	_ [unsafe.Sizeof(C.struct_xrnic_device_attr{}) - unsafe.Sizeof(deviceAttr{})]byte
	_ [unsafe.Sizeof(deviceAttr{}) - unsafe.Sizeof(C.struct_xrnic_device_attr{})]byte
	_ [unsafe.Sizeof(C.struct_xrnic_event{}) - unsafe.Sizeof(eventT{})]byte
	_ [unsafe.Sizeof(eventT{}) - unsafe.Sizeof(C.struct_xrnic_event{})]byte
	_ [unsafe.Sizeof(C.struct_xrnic_wc{}) - unsafe.Sizeof(wcT{})]byte
	_ [unsafe.Sizeof(wcT{}) - unsafe.Sizeof(C.struct_xrnic_wc{})]byte
	_ [unsafe.Sizeof(C.struct_xrnic_qp_init{}) - unsafe.Sizeof(qpInitT{})]byte
	_ [unsafe.Sizeof(qpInitT{}) - unsafe.Sizeof(C.struct_xrnic_qp_init{})]byte
	_ [unsafe.Sizeof(C.struct_xrnic_sge{}) - unsafe.Sizeof(sgeT{})]byte
	_ [unsafe.Sizeof(sgeT{}) - unsafe.Sizeof(C.struct_xrnic_sge{})]byte
	_ [unsafe.Sizeof(C.struct_xrnic_send_wr{}) - unsafe.Sizeof(sendWRT{})]byte
	_ [unsafe.Sizeof(sendWRT{}) - unsafe.Sizeof(C.struct_xrnic_send_wr{})]byte
	_ [unsafe.Sizeof(C.struct_xrnic_recv_wr{}) - unsafe.Sizeof(recvWRT{})]byte
	_ [unsafe.Sizeof(recvWRT{}) - unsafe.Sizeof(C.struct_xrnic_recv_wr{})]byte
	_ [unsafe.Sizeof(C.struct_xrnic_conn_param{}) - unsafe.Sizeof(connParamT{})]byte
	_ [unsafe.Sizeof(C.struct_xrnic_srq_init{}) - unsafe.Sizeof(srqInitT{})]byte
	_ [unsafe.Sizeof(srqInitT{}) - unsafe.Sizeof(C.struct_xrnic_srq_init{})]byte
	_ [unsafe.Sizeof(C.struct_xrnic_srq_attr{}) - unsafe.Sizeof(srqAttrT{})]byte
	_ [unsafe.Sizeof(srqAttrT{}) - unsafe.Sizeof(C.struct_xrnic_srq_attr{})]byte
	_ [unsafe.Sizeof(connParamT{}) - unsafe.Sizeof(C.struct_xrnic_conn_param{})]byte
)

// Offsets where Go's and C's padding rules could part.
var (
	_ [unsafe.Offsetof(C.struct_xrnic_device_attr{}.max_mr_size) - unsafe.Offsetof(deviceAttr{}.MaxMRSize)]byte
	_ [unsafe.Offsetof(deviceAttr{}.MaxMRSize) - unsafe.Offsetof(C.struct_xrnic_device_attr{}.max_mr_size)]byte
	_ [unsafe.Offsetof(C.struct_xrnic_device_attr{}.afxdp) - unsafe.Offsetof(deviceAttr{}.AFXDP)]byte
	_ [unsafe.Offsetof(deviceAttr{}.AFXDP) - unsafe.Offsetof(C.struct_xrnic_device_attr{}.afxdp)]byte
	_ [unsafe.Offsetof(C.struct_xrnic_event{}.local) - unsafe.Offsetof(eventT{}.Local)]byte
	_ [unsafe.Offsetof(eventT{}.Local) - unsafe.Offsetof(C.struct_xrnic_event{}.local)]byte
	_ [unsafe.Offsetof(C.struct_xrnic_event{}.peer) - unsafe.Offsetof(eventT{}.Peer)]byte
	_ [unsafe.Offsetof(eventT{}.Peer) - unsafe.Offsetof(C.struct_xrnic_event{}.peer)]byte
	_ [unsafe.Offsetof(C.struct_xrnic_event{}.private_data_len) - unsafe.Offsetof(eventT{}.PrivateDataLen)]byte
	_ [unsafe.Offsetof(eventT{}.PrivateDataLen) - unsafe.Offsetof(C.struct_xrnic_event{}.private_data_len)]byte
	_ [unsafe.Offsetof(C.struct_xrnic_wc{}.wc_flags) - unsafe.Offsetof(wcT{}.WCFlags)]byte
	_ [unsafe.Offsetof(wcT{}.WCFlags) - unsafe.Offsetof(C.struct_xrnic_wc{}.wc_flags)]byte
	_ [unsafe.Offsetof(C.struct_xrnic_qp_init{}.async_ch) - unsafe.Offsetof(qpInitT{}.AsyncCh)]byte
	_ [unsafe.Offsetof(qpInitT{}.AsyncCh) - unsafe.Offsetof(C.struct_xrnic_qp_init{}.async_ch)]byte
	_ [unsafe.Offsetof(C.struct_xrnic_qp_init{}.srq) - unsafe.Offsetof(qpInitT{}.SRQ)]byte
	_ [unsafe.Offsetof(qpInitT{}.SRQ) - unsafe.Offsetof(C.struct_xrnic_qp_init{}.srq)]byte
	_ [unsafe.Offsetof(C.struct_xrnic_srq_init{}.async_ch) - unsafe.Offsetof(srqInitT{}.AsyncCh)]byte
	_ [unsafe.Offsetof(srqInitT{}.AsyncCh) - unsafe.Offsetof(C.struct_xrnic_srq_init{}.async_ch)]byte
	_ [unsafe.Offsetof(C.struct_xrnic_send_wr{}.sg_list) - unsafe.Offsetof(sendWRT{}.SgList)]byte
	_ [unsafe.Offsetof(sendWRT{}.SgList) - unsafe.Offsetof(C.struct_xrnic_send_wr{}.sg_list)]byte
	_ [unsafe.Offsetof(C.struct_xrnic_send_wr{}.remote_addr) - unsafe.Offsetof(sendWRT{}.RemoteAddr)]byte
	_ [unsafe.Offsetof(sendWRT{}.RemoteAddr) - unsafe.Offsetof(C.struct_xrnic_send_wr{}.remote_addr)]byte
	_ [unsafe.Offsetof(C.struct_xrnic_send_wr{}.swap_mask) - unsafe.Offsetof(sendWRT{}.SwapMask)]byte
	_ [unsafe.Offsetof(sendWRT{}.SwapMask) - unsafe.Offsetof(C.struct_xrnic_send_wr{}.swap_mask)]byte
	_ [unsafe.Offsetof(C.struct_xrnic_recv_wr{}.num_sge) - unsafe.Offsetof(recvWRT{}.NumSGE)]byte
	_ [unsafe.Offsetof(recvWRT{}.NumSGE) - unsafe.Offsetof(C.struct_xrnic_recv_wr{}.num_sge)]byte
	_ [unsafe.Offsetof(C.struct_xrnic_conn_param{}.initiator_depth) - unsafe.Offsetof(connParamT{}.InitiatorDepth)]byte
	_ [unsafe.Offsetof(connParamT{}.InitiatorDepth) - unsafe.Offsetof(C.struct_xrnic_conn_param{}.initiator_depth)]byte
)

//export xrnic_open
func xrnic_open() C.int { return C.int(openDevice()) }

//export xrnic_close
func xrnic_close() C.int { return C.int(closeDevice()) }

//export xrnic_last_error
func xrnic_last_error(buf *C.char, n C.int) C.int {
	msg := lastError()
	if buf != nil && n > 0 {
		b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
		k := copy(b[:n-1], msg)
		b[k] = 0
	}
	return C.int(len(msg))
}

//export xrnic_query_device
func xrnic_query_device(attr *C.struct_xrnic_device_attr) C.int {
	if attr == nil {
		return C.int(fail(22, "xrnic_query_device: attr is NULL"))
	}
	return C.int(queryDevice((*deviceAttr)(unsafe.Pointer(attr))))
}

//export xrnic_chan_create
func xrnic_chan_create(fd *C.int, ch *C.uint64_t) C.int {
	if fd == nil || ch == nil {
		return C.int(fail(22, "xrnic_chan_create: NULL argument"))
	}
	var f int32
	var h uint64
	e := createChan(&f, &h)
	if e == 0 {
		*fd, *ch = C.int(f), C.uint64_t(h)
	}
	return C.int(e)
}

//export xrnic_chan_destroy
func xrnic_chan_destroy(ch C.uint64_t) C.int { return C.int(destroyChan(uint64(ch))) }

//export xrnic_chan_get
func xrnic_chan_get(ch C.uint64_t, ev *C.struct_xrnic_event) C.int {
	if ev == nil {
		return C.int(fail(22, "xrnic_chan_get: ev is NULL"))
	}
	return C.int(chanGet(uint64(ch), (*eventT)(unsafe.Pointer(ev))))
}

//export xrnic_alloc_pd
func xrnic_alloc_pd(pd *C.uint64_t) C.int {
	if pd == nil {
		return C.int(fail(22, "xrnic_alloc_pd: NULL argument"))
	}
	return C.int(allocPD((*uint64)(unsafe.Pointer(pd))))
}

//export xrnic_dealloc_pd
func xrnic_dealloc_pd(pd C.uint64_t) C.int { return C.int(deallocPD(uint64(pd))) }

//export xrnic_reg_mr
func xrnic_reg_mr(pd C.uint64_t, addr unsafe.Pointer, length, iova C.uint64_t, access C.int, mr *C.uint64_t, stag *C.uint32_t) C.int {
	if mr == nil || stag == nil {
		return C.int(fail(22, "xrnic_reg_mr: NULL argument"))
	}
	return C.int(regMR(uint64(pd), addr, uint64(length), uint64(iova), int32(access),
		(*uint64)(unsafe.Pointer(mr)), (*uint32)(unsafe.Pointer(stag))))
}

//export xrnic_dereg_mr
func xrnic_dereg_mr(mr C.uint64_t) C.int { return C.int(deregMR(uint64(mr))) }

//export xrnic_create_cq
func xrnic_create_cq(cqe C.int, ch, cookie C.uint64_t, cq *C.uint64_t, depth *C.int) C.int {
	if cq == nil || depth == nil {
		return C.int(fail(22, "xrnic_create_cq: NULL argument"))
	}
	var d int32
	e := createCQ(int32(cqe), uint64(ch), uint64(cookie), (*uint64)(unsafe.Pointer(cq)), &d)
	if e == 0 {
		*depth = C.int(d)
	}
	return C.int(e)
}

//export xrnic_destroy_cq
func xrnic_destroy_cq(cq C.uint64_t) C.int { return C.int(destroyCQ(uint64(cq))) }

//export xrnic_cq_resize
func xrnic_cq_resize(cq C.uint64_t, cqe C.int, actual *C.int) C.int {
	if actual == nil {
		return C.int(fail(22, "xrnic_cq_resize: NULL argument"))
	}
	var n int32
	e := resizeCQ(uint64(cq), int32(cqe), &n)
	if e == 0 {
		*actual = C.int(n)
	}
	return C.int(e)
}

//export xrnic_poll_cq
func xrnic_poll_cq(cq C.uint64_t, n C.int, wc *C.struct_xrnic_wc) C.int {
	return C.int(pollCQ(uint64(cq), int32(n), (*wcT)(unsafe.Pointer(wc))))
}

//export xrnic_cq_count_pushes
func xrnic_cq_count_pushes(cq C.uint64_t, counter *C.struct_xrnic_push_counter) C.int {
	return C.int(countPushes(uint64(cq), unsafe.Pointer(counter)))
}

//export xrnic_drive
func xrnic_drive(cq C.uint64_t) C.int { return C.int(drive(uint64(cq))) }

//export xrnic_req_notify_cq
func xrnic_req_notify_cq(cq C.uint64_t, solicitedOnly C.int) C.int {
	return C.int(reqNotifyCQ(uint64(cq), int32(solicitedOnly)))
}

//export xrnic_create_qp
func xrnic_create_qp(pd C.uint64_t, init *C.struct_xrnic_qp_init, qp *C.uint64_t, qpn *C.uint32_t) C.int {
	if init == nil || qp == nil || qpn == nil {
		return C.int(fail(22, "xrnic_create_qp: NULL argument"))
	}
	return C.int(createQP(uint64(pd), (*qpInitT)(unsafe.Pointer(init)), (*uint64)(unsafe.Pointer(qp)), (*uint32)(unsafe.Pointer(qpn))))
}

//export xrnic_destroy_qp
func xrnic_destroy_qp(qp C.uint64_t) C.int { return C.int(destroyQP(uint64(qp))) }

//export xrnic_qp_state
func xrnic_qp_state(qp C.uint64_t, state *C.int) C.int {
	if state == nil {
		return C.int(fail(22, "xrnic_qp_state: NULL argument"))
	}
	var s int32
	e := qpState(uint64(qp), &s)
	if e == 0 {
		*state = C.int(s)
	}
	return C.int(e)
}

//export xrnic_qp_to_error
func xrnic_qp_to_error(qp C.uint64_t) C.int { return C.int(qpToError(uint64(qp))) }

//export xrnic_post_send
func xrnic_post_send(qp C.uint64_t, wr *C.struct_xrnic_send_wr, n C.int, posted *C.int) C.int {
	return C.int(postSend(uint64(qp), (*sendWRT)(unsafe.Pointer(wr)), int32(n), (*int32)(unsafe.Pointer(posted))))
}

//export xrnic_post_recv
func xrnic_post_recv(qp C.uint64_t, wr *C.struct_xrnic_recv_wr, n C.int, posted *C.int) C.int {
	return C.int(postRecv(uint64(qp), (*recvWRT)(unsafe.Pointer(wr)), int32(n), (*int32)(unsafe.Pointer(posted))))
}

//export xrnic_create_srq
func xrnic_create_srq(pd C.uint64_t, init *C.struct_xrnic_srq_init, srq *C.uint64_t) C.int {
	if init == nil || srq == nil {
		return C.int(fail(22, "xrnic_create_srq: NULL argument"))
	}
	return C.int(createSRQ(uint64(pd), (*srqInitT)(unsafe.Pointer(init)), (*uint64)(unsafe.Pointer(srq))))
}

//export xrnic_destroy_srq
func xrnic_destroy_srq(srq C.uint64_t) C.int { return C.int(destroySRQ(uint64(srq))) }

//export xrnic_modify_srq
func xrnic_modify_srq(srq C.uint64_t, attr *C.struct_xrnic_srq_attr, mask C.int) C.int {
	if attr == nil {
		return C.int(fail(22, "xrnic_modify_srq: attr is NULL"))
	}
	return C.int(modifySRQ(uint64(srq), (*srqAttrT)(unsafe.Pointer(attr)), int32(mask)))
}

//export xrnic_query_srq
func xrnic_query_srq(srq C.uint64_t, attr *C.struct_xrnic_srq_attr) C.int {
	if attr == nil {
		return C.int(fail(22, "xrnic_query_srq: attr is NULL"))
	}
	return C.int(querySRQ(uint64(srq), (*srqAttrT)(unsafe.Pointer(attr))))
}

//export xrnic_post_srq_recv
func xrnic_post_srq_recv(srq C.uint64_t, wr *C.struct_xrnic_recv_wr, n C.int, posted *C.int) C.int {
	return C.int(postSRQRecv(uint64(srq), (*recvWRT)(unsafe.Pointer(wr)), int32(n), (*int32)(unsafe.Pointer(posted))))
}

//export xrnic_cm_create_id
func xrnic_cm_create_id(ch, cookie C.uint64_t, id *C.uint64_t) C.int {
	if id == nil {
		return C.int(fail(22, "xrnic_cm_create_id: NULL argument"))
	}
	return C.int(createID(uint64(ch), uint64(cookie), (*uint64)(unsafe.Pointer(id))))
}

//export xrnic_cm_set_cookie
func xrnic_cm_set_cookie(id, cookie C.uint64_t) C.int {
	return C.int(setCookie(uint64(id), uint64(cookie)))
}

//export xrnic_cm_destroy_id
func xrnic_cm_destroy_id(id C.uint64_t) C.int { return C.int(destroyID(uint64(id))) }

//export xrnic_cm_migrate_id
func xrnic_cm_migrate_id(id, ch C.uint64_t) C.int { return C.int(migrateID(uint64(id), uint64(ch))) }

//export xrnic_cm_bind
func xrnic_cm_bind(id C.uint64_t, addr *C.struct_sockaddr) C.int {
	return C.int(bindID(uint64(id), unsafe.Pointer(addr)))
}

//export xrnic_cm_resolve_addr
func xrnic_cm_resolve_addr(id C.uint64_t, src, dst *C.struct_sockaddr, srcOut *C.struct_sockaddr_storage) C.int {
	return C.int(resolveAddr(uint64(id), unsafe.Pointer(src), unsafe.Pointer(dst), (*sockaddrStorage)(unsafe.Pointer(srcOut))))
}

//export xrnic_cm_resolve_route
func xrnic_cm_resolve_route(id C.uint64_t) C.int { return C.int(resolveRoute(uint64(id))) }

//export xrnic_cm_listen
func xrnic_cm_listen(id C.uint64_t, backlog C.int) C.int {
	return C.int(listenID(uint64(id), int32(backlog)))
}

//export xrnic_cm_connect
func xrnic_cm_connect(id, qp C.uint64_t, p *C.struct_xrnic_conn_param) C.int {
	return C.int(connectID(uint64(id), uint64(qp), (*connParamT)(unsafe.Pointer(p))))
}

//export xrnic_cm_accept
func xrnic_cm_accept(id, qp C.uint64_t, p *C.struct_xrnic_conn_param) C.int {
	return C.int(acceptID(uint64(id), uint64(qp), (*connParamT)(unsafe.Pointer(p))))
}

//export xrnic_cm_reject
func xrnic_cm_reject(id C.uint64_t, pd unsafe.Pointer, n C.int) C.int {
	return C.int(rejectID(uint64(id), pd, int32(n)))
}

//export xrnic_cm_disconnect
func xrnic_cm_disconnect(id C.uint64_t) C.int { return C.int(disconnectID(uint64(id))) }

//export xrnic_cm_addrs
func xrnic_cm_addrs(id C.uint64_t, local, peer *C.struct_sockaddr_storage) C.int {
	return C.int(addrsID(uint64(id), (*sockaddrStorage)(unsafe.Pointer(local)), (*sockaddrStorage)(unsafe.Pointer(peer))))
}
