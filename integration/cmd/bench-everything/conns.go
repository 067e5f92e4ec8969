package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// tcpConnsTo counts pid's established TCP connections to port on loopback
// (the member apiserver's): the connections under its watch requests,
// which HTTP/2 multiplexes. It matches the socket inodes of pid's open
// files against /proc/<pid>/net/tcp{,6}.
func tcpConnsTo(pid, port int) (int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st ... inode (the 10th field)
			fs := strings.Fields(l)
			if len(fs) < 10 || fs[3] != "01" || !inodes[fs[9]] { // 01: ESTABLISHED
				continue
			}
			i := strings.LastIndexByte(fs[2], ':')
			if p, err := strconv.ParseInt(fs[2][i+1:], 16, 32); err == nil && int(p) == port {
				n++
			}
		}
	}
	return n, nil
}

// hostPort is the port of a REST config's host URL.
func hostPort(host string) (int, error) {
	u, err := url.Parse(host)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(u.Port())
}
