// Package crc32c computes the CRC32c (Castagnoli) checksum that MPA uses to
// protect every FPDU (RFC 5044 §4.4, which takes the algorithm from the iSCSI
// header and data digests of RFC 3720 §12.1 and App. B.4).
//
// The work is done by hash/crc32 on its Castagnoli table, which the standard
// library accelerates with the SSE4.2 CRC32 instruction on amd64 (and the
// CRC instructions on arm64 and others). The table is built once at package
// init, so no call allocates or synchronises.
//
// The checksum value is a uint32. On the wire MPA serialises it least
// significant byte first (RFC 5044 Fig. 5 shows bytes 52 23 99 83 for the
// value 0x83992352); PutWire and Wire convert. Because of that byte order,
// running the CRC over the covered bytes followed by the CRC field as sent
// always yields the constant Residue, which lets a receiver check a frame
// with one pass over all of it.
package crc32c

import (
	"encoding/binary"
	"hash/crc32"
)

// Residue is the CRC32c of any byte string followed by its own CRC32c in
// wire order (least significant byte first).
const Residue uint32 = 0x48674BC7

// Size is the size of a CRC32c field in bytes.
const Size = 4

// table is hash/crc32's Castagnoli table; passing this pointer to
// crc32.Update selects the hardware implementation.
var table = crc32.MakeTable(crc32.Castagnoli)

// Table returns the *crc32.Table this package uses, for callers that need a
// hash.Hash32 (crc32.New(crc32c.Table())).
func Table() *crc32.Table { return table }

// Checksum returns the CRC32c of p.
func Checksum(p []byte) uint32 { return crc32.Update(0, table, p) }

// Update returns the CRC32c of the bytes hashed into crc so far followed by
// p. Start with 0: Update(Update(0, a), b) == Checksum(a||b), exactly like
// hash/crc32.Update, so a frame arriving in pieces can be checked piecewise.
func Update(crc uint32, p []byte) uint32 { return crc32.Update(crc, table, p) }

// PutWire stores c into b[0:4] in MPA wire order (least significant byte
// first). It panics if len(b) < 4, like encoding/binary.
func PutWire(b []byte, c uint32) { binary.LittleEndian.PutUint32(b, c) }

// Wire reads a CRC32c stored in MPA wire order from b[0:4].
func Wire(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
