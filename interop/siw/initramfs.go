package siw

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// writeInitramfs writes an uncompressed newc cpio archive (the kernel's
// initramfs format) of the tree at root plus extra files (archive path ->
// host file), extra taking precedence. Everything is owned by root.
func writeInitramfs(path, root string, extra map[string]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := &cpioWriter{w: bufio.NewWriterSize(f, 1<<20)}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		name := strings.TrimPrefix(p, root+"/")
		if _, ok := extra["/"+name]; ok {
			return nil
		}
		return w.addHost(name, p)
	})
	if err == nil {
		keys := make([]string, 0, len(extra))
		for k := range extra {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			name := strings.TrimPrefix(k, "/")
			for dir := filepath.Dir(name); dir != "."; dir = filepath.Dir(dir) {
				if _, serr := os.Stat(filepath.Join(root, dir)); serr != nil {
					return fmt.Errorf("%s: directory %s not in the guest tree", k, dir)
				}
			}
			if err = w.addHost(name, extra[k]); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = w.entry("TRAILER!!!", 0, 0, nil)
	}
	if err == nil {
		err = w.w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

type cpioWriter struct {
	w   *bufio.Writer
	ino uint32
}

func (c *cpioWriter) addHost(name, host string) error {
	fi, err := os.Lstat(host)
	if err != nil {
		return err
	}
	mode := uint32(fi.Mode().Perm())
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(host)
		if err != nil {
			return err
		}
		return c.entry(name, 0o120000|0o777, 1, []byte(target))
	case fi.IsDir():
		return c.entry(name, 0o040000|mode, 2, nil)
	case fi.Mode().IsRegular():
		b, err := os.ReadFile(host)
		if err != nil {
			return err
		}
		return c.entry(name, 0o100000|mode, 1, b)
	}
	return fmt.Errorf("%s: unsupported file type %v", host, fi.Mode())
}

func (c *cpioWriter) entry(name string, mode, nlink uint32, data []byte) error {
	c.ino++
	// newc: magic, then 13 eight-digit hex fields, then the name (with
	// NUL) and the data, each padded to 4 bytes.
	_, err := fmt.Fprintf(c.w, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	if err != nil {
		return err
	}
	io.WriteString(c.w, name)
	c.w.WriteByte(0)
	c.pad(110 + len(name) + 1)
	c.w.Write(data)
	c.pad(len(data))
	return nil
}

func (c *cpioWriter) pad(n int) {
	for ; n%4 != 0; n++ {
		c.w.WriteByte(0)
	}
}
