# usage: ruby RbSpawn.rb MODE CMD...  MODE in system|spawn
f = File.open("/tmp/spawners-secret.txt")   # ruby opens with O_CLOEXEC
f.close_on_exec = false                      # clear it
$stdout.sync = true
mode = ARGV.shift
if mode == "system"
  system(*ARGV)
else
  pid = Process.spawn(*ARGV)
  Process.wait(pid)
end
