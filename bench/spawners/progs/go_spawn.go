// usage: go_spawn CMD...
package main
import ("os"; "os/exec"; "syscall")
func main() {
	// os.Open uses O_CLOEXEC; use the raw syscall without it so the fd is inheritable
	fd, err := syscall.Open("/tmp/spawners-secret.txt", syscall.O_RDONLY, 0)
	if err != nil { panic(err) }
	_ = fd
	c := exec.Command(os.Args[1], os.Args[2:]...)
	c.Stdout = os.Stdout
	c.Stderr = os.Stderr
	if err := c.Run(); err != nil { panic(err) }
}
