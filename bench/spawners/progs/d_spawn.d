// usage: d_spawn MODE CMD...  MODE in spawnProcess|execute
import std.process, std.stdio;
void main(string[] args) {
    auto f = File("/tmp/spawners-secret.txt", "r");   // fopen("r"): no O_CLOEXEC -> inheritable
    auto cmd = args[2 .. $];
    stdout.flush();
    if (args[1] == "spawnProcess") {
        auto pid = spawnProcess(cmd);
        wait(pid);
    } else {
        auto r = execute(cmd);                           // captures output through a pipe
        write(r.output); stdout.flush();
    }
}
