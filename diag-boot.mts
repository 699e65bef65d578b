import { bootImage } from "./builder/boot/qemu.ts";
const vm = await bootImage({ image: "/tmp/diag/out/icn-bootstrap.qcow2", firmware: "bios", timeoutSeconds: 1500, memoryMiB: 4096, keepRunning: true, tcgMultiThread: true, hostForwards: ["tcp:127.0.0.1:22222-:22"], onLine: (l) => { if (/ICN-BOOTSTRAP|FAILED|icn-bootstrap:/.test(l)) console.log("console:", l); } });
console.log("ready", vm.ready, "failure", vm.failure, "seconds", vm.seconds);
console.log(vm.lastLines.slice(-15).join("\n"));
await new Promise(() => {}); // keep QEMU for ssh
