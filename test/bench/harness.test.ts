/**
 * The benchmark harness runs: `--quick` drives every probe through real servers (small and short:
 * this checks that the harness works and that each probe produced samples, not what it measures;
 * figures come from full runs recorded in docs/benchmarks.md).
 */
import { describe, expect, it } from "vitest"
import { runScript } from "../support/scripts.js"
import { ensureBuilt } from "../support/server.js"

describe("the benchmark harness", () => {
  it("--quick runs every probe against real servers and reports samples for each", async () => {
    ensureBuilt()
    const { code, out } = await runScript("scripts/bench/harness.js", ["--quick"])
    expect(code, out).toBe(0)
    const rows = out.split("\n").filter((l) => /^\| (baseline|brain):/.test(l))
    const probes = [
      "baseline: node:http + 1 group-committed fdatasync, 1 concurrent",
      "baseline: node:http + 4 group-committed fdatasyncs in a row, 64 concurrent",
      "brain: create a session",
      "brain: text turn (sync send, 200 with the outcome), 1 session",
      "brain: text turn with an Idempotency-Key, 1 session",
      "brain: text turn without a key, 1 session",
      "brain: text turns, 64 sessions",
      "brain: admission",
      "brain: first SSE frame",
      "brain: tool loop 2 rounds × 4 parallel host-tool calls, 1 session",
      "brain: tool loop 2 rounds × 4 parallel host-tool calls, 64 sessions",
      "with its checkpoint",
      "without its checkpoint",
      "stored sessions",
      "empty data directory"
    ]
    for (const probe of probes) {
      const line = rows.find((l) => l.includes(probe))
      expect(line, `${probe} in\n${out}`).toBeDefined()
      const [, , n, p50] = line!.split("|").map((c) => c.trim())
      expect(Number(n), line).toBeGreaterThan(0)
      expect(Number(p50), line).toBeGreaterThan(0)
    }
    expect(out).toMatch(/journal bytes per turn over \d+ turns/)
    expect(out).toMatch(/\| warm .* \| -?\d+\.\d KiB \|/)
    expect(out).toMatch(/\| suspended, just created .* \| -?\d+\.\d KiB \|/)
    expect(out).toMatch(/\| suspended after \d+ turns, BRAIN_CACHE_BYTES=0 .* \| -?\d+\.\d KiB \|/)
  }, 900_000)
})
