/**
 * Durability for what the REST API reports as done: a published file (or record) must
 * survive a power cut right after the answer. Data is flushed before the rename that
 * publishes it, and the directory after it, so a reboot finds either the old state or
 * the whole new file, never a name with missing bytes.
 */
import { open } from "node:fs/promises";

export async function syncFile(path: string): Promise<void> {
  const handle = await open(path, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** fsync of a directory: makes the renames into it durable. */
export async function syncDir(dir: string): Promise<void> {
  await syncFile(dir);
}
