/**
 * The stand-alone benchmarks that import the built modules directly (not through a server) still
 * run: they reach into dist/, so a renamed export or a changed input shape breaks them without
 * breaking the build. Small and short: this checks that each completes and prints its table,
 * not what it measures (figures come from full runs recorded in docs/benchmarks.md).
 */
import { describe, expect, it } from "vitest"
import { runScript } from "../support/scripts.js"
import { ensureBuilt } from "../support/server.js"

describe("the stand-alone benchmarks", () => {
  it("bench:wasm runs the official loop's text turn inline, on the pool and in TypeScript, and reports each", async () => {
    ensureBuilt()
    const { code, out } = await runScript("scripts/bench/wasm.js", ["--activations", "40", "--calls", "200", "--turns", "60", "--inline-ms", "2000"])
    expect(code, out).toBe(0)
    for (const loop of ["inline", "pool", "ts"]) {
      expect(out, out).toMatch(new RegExp(`^\\| 1 \\| ${loop} \\| \\d+\\.\\d+ \\|`, "m"))
      expect(out, out).toMatch(new RegExp(`^\\| 64 \\| ${loop} \\| \\d+\\.\\d+ \\|`, "m"))
    }
    // Every activation of the inline host ran where it was meant to: none failed over to the pool
    // (with an allowance no pause of a loaded machine reaches, so this checks where, not how fast).
    expect(out).toMatch(/Where the inline host's activations ran: \{"inline":\d+,"moved":0,"pool":0\}/)
  }, 120_000)

  it("the transcript-tail bench finds the tail both ways at every conversation length", async () => {
    ensureBuilt()
    const { code, out } = await runScript("scripts/bench/tail.js")
    expect(code, out).toBe(0)
    for (const turns of [25, 250, 1000]) expect(out, out).toMatch(new RegExp(`^\\| ${turns} \\| ${turns * 12} \\| \\d+\\.\\d \\| \\d+\\.\\d\\d \\|`, "m"))
  }, 120_000)
})
