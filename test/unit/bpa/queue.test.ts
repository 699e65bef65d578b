import { describe, expect, it } from "vitest";
import { WorkQueue } from "../../../bpa/runtime/queue.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("work queue", () => {
  it("queues a key once and hands it out in order", async () => {
    const q = new WorkQueue();
    q.add("a");
    q.add("b");
    q.add("a");
    expect(q.length).toBe(2);
    expect(await q.get()).toBe("a");
    expect(await q.get()).toBe("b");
  });

  it("never hands one key to two workers; an add during processing is replayed after done", async () => {
    const q = new WorkQueue();
    q.add("a");
    const key = await q.get();
    q.add("a"); // while processing
    expect(q.length).toBe(0);
    let second: string | undefined;
    void q.get().then((k) => (second = k));
    await sleep(5);
    expect(second).toBeUndefined();
    q.done(key!);
    await sleep(5);
    expect(second).toBe("a");
  });

  it("backs off exponentially per key and forget resets it", () => {
    const q = new WorkQueue({ baseDelayMs: 100, maxDelayMs: 1000 });
    expect([1, 2, 3, 4, 5].map(() => q.addRateLimited("x"))).toEqual([100, 200, 400, 800, 1000]);
    expect(q.addRateLimited("y")).toBe(100);
    q.forget("x");
    expect(q.addRateLimited("x")).toBe(100);
    q.shutdown();
  });

  it("delivers delayed adds, keeping the earliest due time", async () => {
    const q = new WorkQueue();
    q.addAfter("k", 1000);
    q.addAfter("k", 10);
    const started = Date.now();
    expect(await q.get()).toBe("k");
    expect(Date.now() - started).toBeLessThan(500);
    q.shutdown();
  });

  it("wakes waiting workers on shutdown", async () => {
    const q = new WorkQueue();
    const pending = q.get();
    q.shutdown();
    expect(await pending).toBeUndefined();
  });
});
