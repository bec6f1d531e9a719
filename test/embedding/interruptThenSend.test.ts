/**
 * `Sessions.interrupt` answers once the turn is closed (services/Sessions.ts): an embedder that
 * interrupts a running turn and sends on the same session at once is never refused
 * `session_busy` for the turn it just interrupted. Over the runtime `layer` builds, with an
 * in-process tool that never answers (the turn is running when it is interrupted), many times to
 * give a race its chances.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, FiberId, ManagedRuntime } from "effect"
import { layer, Sessions } from "../../src/effect.js"

const ROUNDS = 25

const dirs: Array<string> = []
afterEach(() => {
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
})

describe("interrupt, then send at once", () => {
  it(`a send right after interrupt answers is never refused busy: the interrupted turn is closed by then (${ROUNDS} rounds)`, async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-interrupt-send-"))
    dirs.push(dataDir)
    let called = Deferred.unsafeMake<void>(FiberId.none)
    const runtime = ManagedRuntime.make(layer({ dataDir, cancelGraceMs: 200 }, {
      tools: {
        // Tells the test it runs, then never answers (and yields to interruption).
        hanging: () => Effect.zipRight(Deferred.succeed(called, undefined), Effect.never)
      }
    }))
    try {
      const refused: Array<string> = []
      await runtime.runPromise(Effect.gen(function*() {
        const sessions = yield* Sessions
        for (let round = 0; round < ROUNDS; round++) {
          called = yield* Deferred.make<void>()
          const { session_id } = yield* sessions.create({
            model: { provider: "scripted", replies: [{ tool_calls: [{ name: "hanging", input: {} }] }, { text: "after" }] },
            tools: [{ name: "hanging" }]
          })
          const first = yield* Effect.fork(sessions.send(session_id, { message: "go" }))
          yield* Deferred.await(called)
          yield* sessions.interrupt(session_id)
          const second = yield* Effect.exit(sessions.send(session_id, { message: "again" }))
          if (Exit.isFailure(second)) refused.push(`round ${round}: ${String(Exit.isFailure(second) ? second.cause : "")}`)
          yield* Fiber.join(first)
        }
      }))
      expect(refused).toEqual([])
    } finally {
      await runtime.dispose()
    }
  }, 60_000)
})
