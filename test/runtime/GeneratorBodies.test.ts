/**
 * A turn runs no generator function for the first time once the server is warm. An
 * `Effect.gen(function* () {…})` written inside a function makes a new generator function at
 * every call, and V8 gives each one a prototype and a hidden class of its own the first time it
 * runs (about 1.4 µs on Node 20, and a class every later read of the generator misses in its
 * inline caches: docs/benchmarks.md, "Generator bodies made once"). Counted without timing: the
 * fiber runtime's handler of generator steps is wrapped for the test, and each generator object's
 * prototype (its generator function's own `prototype`) is noted; a new one is a new function.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { succeedAfter } from "../../src/layers/ToolsInProcess.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

/** Counts the generator functions the runtime runs while `body` runs that are not in `seen` (and adds them). */
const newGenerators = <A, E, R>(seen: WeakSet<object>, body: Effect.Effect<A, E, R>): Effect.Effect<number, E, R> =>
  Effect.suspend(() => {
    const proto = Object.getPrototypeOf(Effect.runFork(Effect.never)) as Record<string, (this: unknown, op: unknown) => unknown>
    const step = proto["Iterator"]!
    let fresh = 0
    proto["Iterator"] = function(this: unknown, op: unknown) {
      const generator = (op as { effect_instruction_i0?: unknown }).effect_instruction_i0
      const prototype = typeof generator === "object" && generator !== null ? Object.getPrototypeOf(generator) : undefined
      if (prototype && !seen.has(prototype)) {
        seen.add(prototype)
        fresh++
      }
      return step.call(this, op)
    }
    return body.pipe(
      Effect.ensuring(Effect.sync(() => void (proto["Iterator"] = step))),
      Effect.map(() => fresh)
    )
  })

const toolLoop = {
  model: {
    provider: "scripted" as const,
    replies: [
      { tool_calls: [0, 1, 2, 3].map((i) => ({ name: "t", input: { i } })) },
      { tool_calls: [0, 1, 2, 3].map((i) => ({ name: "t", input: { i } })) },
      { text: "done" }
    ]
  },
  tools: [{ name: "t" }]
}

describe("generator bodies made once", () => {
  it.scopedLive("text turns, keyed or not, and tool-loop turns, checkpoints among them, run only generator functions earlier turns ran", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const text = (yield* sessions.create({ model: { provider: "scripted" } })).session_id
      const tools = (yield* sessions.create(toolLoop)).session_id
      let n = 0
      // One generator function for both counts (one made per call would be counted too).
      function* rounds(count: number) {
        for (let i = 0; i < count; i++) {
          yield* sessions.send(text, { message: "hello" })
          yield* sessions.sendKeyed(text, { message: "hello" }, { key: `k${n++}`, hash: "h" })
          const out = yield* sessions.send(tools, { message: "go" })
          expect(out.turn.status).toBe("ended")
        }
      }
      const turns = (count: number) => Effect.gen(() => rounds(count))
      const seen = new WeakSet<object>()
      // The first turns run the functions every turn shares (the probe sees them: it works), and
      // enough of them for every path a turn takes now and then to have run once: a checkpoint
      // of each session (one per 256 records; a tool-loop turn writes about 30)…
      expect(yield* newGenerators(seen, turns(12))).toBeGreaterThan(0)
      // …and later turns, of every kind, run no other: not one generator function made per call.
      expect(yield* newGenerators(seen, turns(6))).toBe(0)
    }).pipe(Effect.provide(runtimeLayer({ tools: { t: succeedAfter(0) } }))))
})
