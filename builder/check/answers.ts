/**
 * Answers of online services that change over time (PyPI's JSON API, the Go module proxy's
 * version lists), kept with the day they were fetched: `lock --check` uses a fresh answer
 * when it can, the kept one offline or when the service is unreachable, and says which.
 * They are not pins: the content-addressed store is for what the lock pins by digest.
 */
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { cacheRoot, sha256Text, tempSibling } from "../cache.js";

export interface Answer {
  url: string;
  /** ISO time it was fetched. */
  fetchedAt: string;
  /** HTTP status (200, or 404 for "no such release"). */
  status: number;
  body: string;
  /** Read from the cache, not fetched now. */
  cached: boolean;
}

export interface AnswerOptions {
  offline: boolean;
  /** The cache directory (default: <cache>/answers). */
  dir?: string;
}

const answersDir = (opts: AnswerOptions) => opts.dir ?? join(cacheRoot(), "answers");

/** The service's answer for a URL (file:// URLs are read, for local mirrors and tests); undefined when neither it nor the cache has one. */
export async function answer(url: string, opts: AnswerOptions): Promise<Answer | undefined> {
  const file = join(answersDir(opts), `${sha256Text(url)}.json`);
  const fresh = opts.offline ? undefined : await fetchAnswer(url);
  // Only a definite answer is kept: 200, or 404 (no such release). A refusal (403, 410, 5xx) is returned when nothing is kept.
  if (fresh && (fresh.status === 200 || fresh.status === 404)) {
    await mkdir(answersDir(opts), { recursive: true });
    const temp = tempSibling(file);
    await writeFile(temp, JSON.stringify(fresh));
    await rename(temp, file);
    return { ...fresh, cached: false };
  }
  try {
    const kept = JSON.parse(await readFile(file, "utf8")) as Omit<Answer, "cached">;
    return { ...kept, cached: true };
  } catch {
    return fresh ? { ...fresh, cached: false } : undefined;
  }
}

async function fetchAnswer(url: string): Promise<Omit<Answer, "cached"> | undefined> {
  const fetchedAt = new Date().toISOString();
  if (url.startsWith("file://")) {
    try {
      return { url, fetchedAt, status: 200, body: await readFile(fileURLToPath(url), "utf8") };
    } catch (error) {
      return (error as NodeJS.ErrnoException).code === "ENOENT" ? { url, fetchedAt, status: 404, body: "" } : undefined;
    }
  }
  try {
    const response = await fetch(url, { redirect: "follow", signal: AbortSignal.timeout(30_000), headers: { accept: "application/json" } });
    return { url, fetchedAt, status: response.status, body: response.status === 200 ? await response.text() : "" };
  } catch {
    return undefined;
  }
}
