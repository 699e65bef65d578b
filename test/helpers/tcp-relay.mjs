// QEMU's guestfwd=...-cmd: runs this once per guest connection: it joins the
// connection (stdin/stdout) to a TCP port on the host's loopback. So a guest on a
// restricted user network reaches exactly one test server and nothing else.
import { connect } from "node:net";

const port = Number(process.argv[2]);
const socket = connect({ host: "127.0.0.1", port });
process.stdin.pipe(socket);
socket.pipe(process.stdout);
socket.on("close", () => process.exit(0));
socket.on("error", () => process.exit(1));
