/**
 * What an application's direct `Sessions.create` (brain/effect, no HTTP) is held to: the same
 * bounds as the HTTP create body's, checked by the service itself. A tool's `timeout_ms` and a
 * session's `idle_ttl_ms` end up in Node timers, which take at most TIMER_SETTING_MAX_MS (a longer
 * delay fires after 1 ms): one past it is refused `InvalidRequest` naming the field, and nothing is
 * written.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "@effect/vitest"
import { Effect, Either, ManagedRuntime } from "effect"
import { layer, Sessions } from "../../src/effect.js"
import { TOOL_TIMEOUT_MAX_MS, TIMER_SETTING_MAX_MS } from "../../src/domain/Limits.js"
import { Journal } from "../../src/services/Journal.js"
import type { CreateSession } from "../../src/services/Sessions.js"

const dirs: Array<string> = []
afterEach(() => {
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
})

const scripted = { provider: "scripted" as const }
const withTimeout = (timeout_ms: number): CreateSession => ({ model: scripted, tools: [{ name: "ok" }, { name: "slow", timeout_ms }] })

describe("Sessions.create, called directly, bounds what ends up in a timer", () => {
  it("refuses a tool's timeout_ms past TOOL_TIMEOUT_MAX_MS, below 1 or not whole, and an idle_ttl_ms past TIMER_SETTING_MAX_MS, InvalidRequest naming the field, writing nothing; the bounds themselves are taken", async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-bounds-"))
    dirs.push(dataDir)
    const runtime = ManagedRuntime.make(layer({ dataDir }))
    try {
      const refused = (request: CreateSession) =>
        runtime.runPromise(Effect.flatMap(Sessions, (sessions) => Effect.either(sessions.create(request))))
      for (const timeout of [2 ** 53 - 1, TOOL_TIMEOUT_MAX_MS + 1, 0, 1.5]) {
        const answer = await refused(withTimeout(timeout))
        expect(Either.isLeft(answer) && answer.left._tag, `timeout_ms ${timeout}`).toBe("InvalidRequest")
        if (Either.isLeft(answer) && answer.left._tag === "InvalidRequest") {
          expect(answer.left.message).toContain("timeout_ms")
          expect(answer.left.details).toEqual([{ path: ["tools", 1, "timeout_ms"], message: expect.stringContaining("timeout_ms") }])
        }
      }
      const ttl = await refused({ model: scripted, idle_ttl_ms: TIMER_SETTING_MAX_MS + 1 })
      expect(Either.isLeft(ttl) && ttl.left._tag).toBe("InvalidRequest")
      if (Either.isLeft(ttl) && ttl.left._tag === "InvalidRequest") {
        expect(ttl.left.details).toEqual([{ path: ["idle_ttl_ms"], message: expect.stringContaining("idle_ttl_ms") }])
      }
      expect(await runtime.runPromise(Effect.orDie(Effect.flatMap(Journal, (journal) => journal.list)))).toEqual([])
      const taken = await refused({ ...withTimeout(TOOL_TIMEOUT_MAX_MS), idle_ttl_ms: TIMER_SETTING_MAX_MS })
      expect(Either.isRight(taken) && taken.right.status).toBe("idle")
    } finally {
      await runtime.dispose()
    }
  }, 60_000)
})
