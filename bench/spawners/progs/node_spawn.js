// usage: node node_spawn.js CMD...
// fs.openSync opens with O_CLOEXEC (libuv); node has no API to clear FD_CLOEXEC -> the secret cannot leak.
const fs = require('fs'); const cp = require('child_process');
const fd = fs.openSync('/tmp/spawners-secret.txt', 'r');
const args = process.argv.slice(2);
const r = cp.spawnSync(args[0], args.slice(1));   // default stdio: pipes
process.stdout.write(r.stdout);
