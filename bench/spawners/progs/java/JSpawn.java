// usage: java JSpawn MODE CMD...  MODE in ProcessBuilder|RuntimeExec
import java.io.*;
public class JSpawn {
  public static void main(String[] a) throws Exception {
    FileInputStream secret = new FileInputStream("/tmp/spawners-secret.txt"); // JDK open(): no O_CLOEXEC
    String[] cmd = java.util.Arrays.copyOfRange(a, 1, a.length);
    Process p = a[0].equals("ProcessBuilder") ? new ProcessBuilder(cmd).start() : Runtime.getRuntime().exec(cmd);
    p.getInputStream().transferTo(System.out);   // default stdio = pipes; copy child's stdout
    System.out.flush();
    p.waitFor();
    secret.close();
  }
}
