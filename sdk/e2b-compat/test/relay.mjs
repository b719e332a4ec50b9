// Runs inside zeishd's network namespace (started with nsenter by the
// harness): joins every connection to the Unix socket argv[2] to the TCP
// address argv[3] there. Unix sockets are files, not network state, so the
// harness in the host's namespace reaches zeishd through one without any
// interface or route on the host.
import { connect, createServer } from "node:net";

const [sock, addr] = process.argv.slice(2);
const i = addr.lastIndexOf(":");
const host = addr.slice(0, i);
const port = Number(addr.slice(i + 1));
createServer((c) => {
  const up = connect(port, host);
  c.pipe(up);
  up.pipe(c);
  c.on("error", () => up.destroy());
  up.on("error", () => c.destroy());
}).listen(sock, () => process.stdout.write("ready\n"));
