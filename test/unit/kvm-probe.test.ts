import { describe, expect, it } from "vitest";
import { probeMachine } from "../../builder/boot/accel.js";

describe("the KVM probe's machine", () => {
  it("prints the console on stdout, where the probe looks for the kernel, and has no NIC", () => {
    const machine = [
      "-machine",
      "q35",
      "-chardev",
      "file,id=console,path=/tmp/x/console.log",
      "-serial",
      "chardev:console",
      "-drive",
      "if=none,id=disk,format=qcow2,file=/tmp/x/disk.qcow2",
      "-device",
      "virtio-blk-pci,drive=disk,bootindex=0",
      "-netdev",
      "tap,id=tapnet,ifname=tap0,script=no,downscript=no",
      "-device",
      "virtio-net-pci,netdev=tapnet,mac=52:54:00:00:00:01",
      "-nic",
      "user,model=virtio-net-pci,restrict=on",
    ];
    expect(probeMachine(machine)).toEqual([
      "-machine",
      "q35",
      "-drive",
      "if=none,id=disk,format=qcow2,file=/tmp/x/disk.qcow2",
      "-device",
      "virtio-blk-pci,drive=disk,bootindex=0",
      "-serial",
      "stdio",
    ]);
  });
});
