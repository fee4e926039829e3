package main

import "unsafe"

// rdma-core ABI values (infiniband/verbs.h, rdma/rdma_cma.h), checked
// against the installed headers by abi_test.go.
const (
	// enum ibv_wc_status
	IBV_WC_SUCCESS         = 0
	IBV_WC_LOC_LEN_ERR     = 1
	IBV_WC_LOC_QP_OP_ERR   = 2
	IBV_WC_LOC_PROT_ERR    = 4
	IBV_WC_WR_FLUSH_ERR    = 5
	IBV_WC_BAD_RESP_ERR    = 7
	IBV_WC_LOC_ACCESS_ERR  = 8
	IBV_WC_REM_INV_REQ_ERR = 9
	IBV_WC_REM_ACCESS_ERR  = 10
	IBV_WC_REM_OP_ERR      = 11
	IBV_WC_RETRY_EXC_ERR   = 12
	IBV_WC_FATAL_ERR       = 19
	IBV_WC_GENERAL_ERR     = 21

	// enum ibv_wc_opcode
	IBV_WC_SEND               = 0
	IBV_WC_RDMA_WRITE         = 1
	IBV_WC_RDMA_READ          = 2
	IBV_WC_COMP_SWAP          = 3
	IBV_WC_FETCH_ADD          = 4
	IBV_WC_LOCAL_INV          = 6
	IBV_WC_RECV               = 128
	IBV_WC_RECV_RDMA_WITH_IMM = 129

	// enum ibv_wc_flags
	IBV_WC_WITH_IMM = 1 << 1
	IBV_WC_WITH_INV = 1 << 3

	// enum ibv_qp_state
	IBV_QPS_INIT = 1
	IBV_QPS_RTR  = 2
	IBV_QPS_RTS  = 3
	IBV_QPS_SQD  = 4
	IBV_QPS_ERR  = 6

	// enum ibv_event_type
	IBV_EVENT_QP_FATAL      = 1
	IBV_EVENT_QP_ACCESS_ERR = 3
	// IBV_EVENT_SRQ_LIMIT_REACHED is 15 in enum ibv_event_type.
	IBV_EVENT_SRQ_LIMIT_REACHED = 15

	// enum ibv_access_flags
	IBV_ACCESS_LOCAL_WRITE      = 1
	IBV_ACCESS_REMOTE_WRITE     = 1 << 1
	IBV_ACCESS_REMOTE_READ      = 1 << 2
	IBV_ACCESS_REMOTE_ATOMIC    = 1 << 3
	IBV_ACCESS_MW_BIND          = 1 << 4
	IBV_ACCESS_ZERO_BASED       = 1 << 5
	IBV_ACCESS_ON_DEMAND        = 1 << 6
	IBV_ACCESS_HUGETLB          = 1 << 7
	IBV_ACCESS_OPTIONAL_FIRST   = 1 << 20
	IBV_ACCESS_OPTIONAL_RANGE   = 0x3ff00000
	IBV_ACCESS_RELAXED_ORDERING = IBV_ACCESS_OPTIONAL_FIRST

	// enum ibv_mtu
	IBV_MTU_256  = 1
	IBV_MTU_512  = 2
	IBV_MTU_1024 = 3
	IBV_MTU_2048 = 4
	IBV_MTU_4096 = 5

	// enum ibv_port_state
	IBV_PORT_DOWN   = 1
	IBV_PORT_ACTIVE = 4

	// enum ibv_atomic_cap
	IBV_ATOMIC_GLOB = 2

	// enum rdma_cm_event_type
	RDMA_CM_EVENT_ADDR_RESOLVED   = 0
	RDMA_CM_EVENT_ADDR_ERROR      = 1
	RDMA_CM_EVENT_ROUTE_RESOLVED  = 2
	RDMA_CM_EVENT_CONNECT_REQUEST = 4
	RDMA_CM_EVENT_CONNECT_ERROR   = 6
	RDMA_CM_EVENT_UNREACHABLE     = 7
	RDMA_CM_EVENT_REJECTED        = 8
	RDMA_CM_EVENT_ESTABLISHED     = 9
	RDMA_CM_EVENT_DISCONNECTED    = 10
)

// xrnic_engine.h values.
const (
	xEvComp  = 1
	xEvAsync = 2
	xEvCM    = 3

	privateDataMax = 512

	wrWrite        = 1
	wrWriteWithImm = 2
	wrSend         = 3
	wrSendWithInv  = 4
	wrRead         = 5
	wrFetchAdd     = 6
	wrCmpSwap      = 7
	wrLocalInv     = 8
	wrImm          = 9

	sendSignaled  = 1 << 0
	sendSolicited = 1 << 1
	sendFence     = 1 << 2
	sendInline    = 1 << 3

	srqMaxWR = 1 << 0
	srqLimit = 1 << 1
)

// The layouts of xrnic_engine.h's structures (exports.go checks sizes and
// offsets against the C compiler's).

type deviceAttr struct {
	FwVer           [64]byte
	Ifname          [32]byte
	MAC             [6]byte
	IPv4            [4]byte
	_               [6]byte
	MaxMRSize       uint64
	PageSizeCap     uint64
	VendorID        uint32
	VendorPartID    uint32
	HwVer           uint32
	MaxQP           int32
	MaxQPWR         int32
	MaxSGE          int32
	MaxCQ           int32
	MaxCQE          int32
	MaxMR           int32
	MaxPD           int32
	MaxQPRdAtom     int32
	MaxQPInitRdAtom int32
	MaxResRdAtom    int32
	MaxInlineData   int32
	MaxMsgSz        uint32
	AtomicCap       int32
	MaskedAtomics   int32
	PortState       int32
	ActiveMTU       int32
	IfMTU           int32
	AFXDP           int32
}

type sockaddrStorage [128]byte

type eventT struct {
	Kind               uint32
	Code               uint32
	Status             int32
	Reserved           uint32
	Cookie             uint64
	NewID              uint64
	ResponderResources uint8
	InitiatorDepth     uint8
	PrivateDataLen     uint16
	PrivateData        [privateDataMax]byte
	_                  [4]byte
	Local, Peer        sockaddrStorage
}

type wcT struct {
	WRID         uint64
	Status       uint32
	Opcode       uint32
	VendorErr    uint32
	ByteLen      uint32
	ImmData      uint32
	QPNum        uint32
	SrcQP        uint32
	WCFlags      uint32
	PkeyIndex    uint16
	Slid         uint16
	SL           uint8
	DlidPathBits uint8
}

type qpInitT struct {
	SendCQ, RecvCQ uint64
	MaxSendWR      uint32
	MaxRecvWR      uint32
	MaxSendSGE     uint32
	MaxRecvSGE     uint32
	MaxInlineData  uint32
	SQSigAll       int32
	AsyncCh        uint64
	Cookie         uint64
	SRQ            uint64
}

type srqInitT struct {
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
	Reserved uint32
	AsyncCh  uint64
	Cookie   uint64
}

type srqAttrT struct {
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
}

type sgeT struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

type sendWRT struct {
	WRID           uint64
	Opcode         uint32
	Flags          uint32
	SgList         unsafe.Pointer
	NumSGE         int32
	RKey           uint32
	RemoteAddr     uint64
	Imm            uint64
	InvalidateRKey uint32
	Reserved       uint32
	CompareAdd     uint64
	Swap           uint64
	AddMask        uint64
	CompareMask    uint64
	SwapMask       uint64
}

type recvWRT struct {
	WRID     uint64
	SgList   unsafe.Pointer
	NumSGE   int32
	Reserved uint32
}

type connParamT struct {
	PrivateData        unsafe.Pointer
	PrivateDataLen     int32
	ResponderResources int32
	InitiatorDepth     int32
	Reserved           int32
}
