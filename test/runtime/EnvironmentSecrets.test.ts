/**
 * A binding's token never leaves the server's environment and the request headers: after a
 * session whose Environment echoes the Authorization header back (in a tool's error and in a
 * teardown's 403), a byte search of the data directory and of every log line finds it zero times,
 * while the fake confirms the token was sent.
 */
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import { Effect, Logger } from "effect"
import { MIN_REDACTED_KEY_CHARS } from "../../src/domain/Limits.js"
import { Sessions } from "../../src/services/Sessions.js"
import { bindingsOf, fakeEnvironment } from "../support/httpEnvironment.js"
import { tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

const TOKEN = "tok-secret-4f9a1c7e2b8d5036e1a4c9f7"

/** Every file under `dir`, read whole. */
const filesUnder = (dir: string): Array<[string, Buffer]> =>
  fs.readdirSync(dir, { withFileTypes: true, recursive: true }).filter((d) => d.isFile()).map((d) => {
    const file = path.join(d.parentPath, d.name)
    return [file, fs.readFileSync(file)]
  })

describe("an Environment credential", () => {
  it.scopedLive("is found zero times in the data directory and the logs, even when the Environment echoes it back", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const f = yield* fakeEnvironment({ HTTP_ENV_TOKEN: TOKEN, HTTP_ENV_LIFECYCLE: JSON.stringify({ teardown: { behaviour: "leak", times: 1 } }) })
      const logs: Array<string> = []
      const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ annotations, message }) => void logs.push(JSON.stringify([message, [...annotations]]))))
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id: id } = yield* sessions.create({
          model: { provider: "scripted", replies: [{ tool_calls: [{ name: "ok", input: {} }, { name: "leak", input: {} }] }, { text: "done" }] },
          environments: [{ name: "sandbox", driver: "http", binding: "sandboxes" }],
          tools: [{ name: "ok", environment: "sandbox" }, { name: "leak", environment: "sandbox" }]
        })
        expect((yield* sessions.send(id, { message: "go" })).turn.status).toBe("ended")
        yield* sessions.end(id)
        const refused = yield* Effect.flip(sessions.delete(id))
        expect(refused.code).toBe("teardown_failed")
        expect(JSON.stringify(refused)).not.toContain(TOKEN)
        expect(JSON.stringify(yield* sessions.events(id, { after: 0, limit: 1000 }))).toContain("<redacted>")
      }).pipe(
        Effect.provide(runtimeLayer({
          journal: { dataDir: dir },
          environments: { bindings: bindingsOf({ sandboxes: { base_url: f.url, token_env: "SANDBOX_TOKEN" } }, { SANDBOX_TOKEN: TOKEN }) }
        })),
        Effect.provide(capture)
      )
      // The token was sent on every request (the fake checks it) …
      expect(f.requests().length).toBeGreaterThanOrEqual(5)
      for (const r of f.requests()) expect(r.auth).toBe(true)
      // … and stored or logged nowhere.
      const files = filesUnder(dir)
      expect(files.length).toBeGreaterThan(0)
      for (const [file, bytes] of files) expect(bytes.indexOf(TOKEN), file).toBe(-1)
      for (const line of logs) expect(line).not.toContain(TOKEN)
    }))

  it.scopedLive("shorter than MIN_REDACTED_KEY_CHARS is a placeholder and is not redacted: what the Environment sends back is recorded as sent, with no <redacted> in it", () =>
    Effect.gen(function*() {
      const short = "k"
      expect(short.length).toBeLessThan(MIN_REDACTED_KEY_CHARS)
      const f = yield* fakeEnvironment({ HTTP_ENV_TOKEN: short })
      const events = yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id: id } = yield* sessions.create({
          model: { provider: "scripted", replies: [{ tool_calls: [{ name: "ok", input: { say: "kind folk keep talking" } }, { name: "leak", input: {} }] }, { text: "done" }] },
          environments: [{ name: "sandbox", driver: "http", binding: "sandboxes" }],
          tools: [{ name: "ok", environment: "sandbox" }, { name: "leak", environment: "sandbox" }]
        })
        expect((yield* sessions.send(id, { message: "go" })).turn.status).toBe("ended")
        return JSON.stringify(yield* sessions.events(id, { after: 0, limit: 1000 }))
      }).pipe(
        Effect.provide(runtimeLayer({
          environments: { bindings: bindingsOf({ sandboxes: { base_url: f.url, token_env: "SANDBOX_TOKEN" } }, { SANDBOX_TOKEN: short }) }
        }))
      )
      expect(f.requests().length).toBeGreaterThan(0)
      expect(events).not.toContain("<redacted>")
    }))
})
