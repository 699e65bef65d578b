// Prints what failed in the last `npm test` (Vitest's JSON report), a few lines each: the
// end of CI's log is what is read first, and the failures themselves may be far above it.
import { readFileSync } from "node:fs";

let report;
try {
  report = JSON.parse(readFileSync(".test-results/vitest.json", "utf8"));
} catch {
  process.exit(0);
}
const short = (text, lines = 6) => String(text ?? "").replace(/\x1b\[[0-9;]*m/g, "").trim().split("\n").slice(0, lines).join("\n    ");
const failed = report.testResults.filter((file) => file.status !== "passed");
if (failed.length === 0) process.exit(0);
console.log(`\nWhat failed (${failed.length} file${failed.length === 1 ? "" : "s"}):`);
for (const file of failed) {
  const name = file.name.replace(`${process.cwd()}/`, "");
  const tests = file.assertionResults.filter((t) => t.status === "failed");
  console.log(`- ${name}: ${tests.length} test${tests.length === 1 ? "" : "s"} failed`);
  if (file.message) console.log(`    the file itself (a hook or its loading): ${short(file.message)}`);
  for (const test of tests) console.log(`    ${test.fullName}: ${short(test.failureMessages?.[0])}`);
}
