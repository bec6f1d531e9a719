/**
 * Objects the turn path makes many of keep one hidden class (V8's map) per shape. On Node 20 an
 * object literal that starts with a spread and then gains fields its source lacks gets a map of
 * its own every time: about a microsecond to make, and every later read of its fields misses
 * V8's inline caches (docs/benchmarks.md, "Objects spread with new fields"). Checked with V8's
 * own `%HaveSameMap` in a child process (the flag that allows it is not for the test runner),
 * against the build the server runs.
 */
import { execFileSync } from "node:child_process"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { ROOT } from "../support/server.js"

const sameMaps = (script: string): string =>
  execFileSync(process.execPath, ["--allow-natives-syntax", "--input-type=module", "-e", script], { cwd: ROOT, encoding: "utf8" }).trim()

describe("hidden classes on the turn path", () => {
  it("every Event toEvent makes of a public record has the same hidden class, whatever its kind or turn", () => {
    const eventsModule = path.join(ROOT, "dist/domain/Events.js")
    const out = sameMaps(`
      const { toEvent } = await import(${JSON.stringify(eventsModule)})
      const kinds = ["turn_started", "activation_started", "activation_ended", "turn_ended"]
      const payloads = [{ input: { message: "hi" }, mode: "send" }, { agentloop: "official" }, { sequence: 3, result: { text: "a" } }, { sequence: 2, result: { text: "a" } }]
      const events = []
      for (let turn = 0; turn < 500; turn++) for (let k = 0; k < kinds.length; k++) {
        events.push(toEvent("ses_x", { sequence: 2 + turn * 4 + k, recorded_at_ms: 1000 + turn, kind: kinds[k], payload: payloads[k] }, 0))
      }
      console.log(events.every((e) => %HaveSameMap(e, events[0])))
    `)
    expect(out).toBe("true")
  })

  it("the check sees a map per object where a literal starts with a spread and adds fields (the runtime's behaviour it guards against)", () => {
    const out = sameMaps(`
      const base = { a: 1 }
      const made = []
      for (let i = 0; i < 1000; i++) made.push({ ...base, b: i })
      const last = made.slice(-10)
      console.log(last.every((e) => %HaveSameMap(e, last[0])))
    `)
    // Should a later Node give these one map, this test says so, and the rule in the docs can go.
    expect(out).toBe("false")
  })
})
