/**
 * What an application's direct calls of `Sessions` (brain/effect, no HTTP before them) are held
 * to when what it passes is not what the types say (a JavaScript caller, or JSON forwarded from
 * elsewhere): a session id that is not one, a turn input of the wrong shape and a create body
 * with a wrong field are each refused with the typed `InvalidRequest` the HTTP API answers 400
 * for, naming the field with `details[].path`, and nothing is written, inside the data directory
 * or outside it. Below the service, the journal and the checkpoint store build no path from an id
 * that is not a session id, whoever calls them.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "@effect/vitest"
import { Effect, Either, Layer, ManagedRuntime, Option } from "effect"
import { Journal, layer, type ModelCall, type SessionId, Sessions } from "../../src/effect.js"
import { entry } from "../../src/domain/Records.js"
import * as CheckpointFiles from "../../src/layers/CheckpointStore.js"
import * as FileDriver from "../../src/layers/journal/FileDriver.js"
import { CheckpointStore } from "../../src/services/Projection.js"

const dirs: Array<string> = []
afterEach(() => {
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
})

/** Every file and directory under `root`, relative to it. */
const tree = (root: string): Array<string> =>
  fs.readdirSync(root, { recursive: true, encoding: "utf8" }).map((p) => p.split(path.sep).join("/")).sort()

/** A data directory two levels down a fresh root, so that an id climbing out of it still lands under the root. */
const nested = () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "brain-caller-"))
  dirs.push(root)
  const dataDir = path.join(root, "a", "b", "data")
  fs.mkdirSync(dataDir, { recursive: true })
  return { root, dataDir }
}

const BAD_IDS = ["../../../escape", "../../etc", "ses_x/y", "ses_" + "0".repeat(25) + "/", "", "ses_" + "A".repeat(26)]

const refusal = (e: Either.Either<unknown, unknown>) =>
  Either.isLeft(e) ? (e.left as { _tag: string; message: string; details?: unknown }) : undefined

describe("an application's Sessions calls with what the types do not allow", () => {
  it("refuse a session id that is not one InvalidRequest naming the id, in every method that takes one, and nothing is made, inside the data directory or outside it", async () => {
    const { dataDir, root } = nested()
    const runtime = ManagedRuntime.make(layer({ dataDir }))
    try {
      const live = await runtime.runPromise(Effect.flatMap(Sessions, (s) => s.create({ model: { provider: "scripted" } })))
      const before = tree(root)
      await runtime.runPromise(Effect.gen(function*() {
        const s = yield* Sessions
        for (const raw of BAD_IDS) {
          const id = raw as SessionId
          const input = { message: "hi" }
          const calls: Record<string, Effect.Effect<unknown, unknown>> = {
            create: s.create({ model: { provider: "scripted" } }, id),
            get: s.get(id),
            send: s.send(id, input),
            submit: s.submit(id, input),
            sendKeyed: s.sendKeyed(id, input, { key: "k", hash: "h" }),
            submitKeyed: s.submitKeyed(id, input, { key: "k", hash: "h" }),
            interrupt: s.interrupt(id),
            end: s.end(id),
            delete: s.delete(id),
            transcript: s.transcript(id),
            events: s.events(id, { after: 0, limit: 10 }),
            follow: Effect.scoped(s.follow(id, 0))
          }
          for (const [method, call] of Object.entries(calls)) {
            const refused = refusal(yield* Effect.either(call))
            expect(refused?._tag, `${method}(${JSON.stringify(raw)})`).toBe("InvalidRequest")
            expect(refused?.message, `${method}(${JSON.stringify(raw)})`).toContain("session id")
            expect(refused?.details, `${method}(${JSON.stringify(raw)})`).toEqual([
              { _tag: "Refinement", path: ["session_id"], message: expect.stringContaining("session id") }
            ])
          }
        }
      }))
      expect(tree(root)).toEqual(before)
      // The session that is one still works.
      const outcome = await runtime.runPromise(Effect.flatMap(Sessions, (s) => s.send(live.session_id, { message: "hi" })))
      expect(outcome.turn.status).toBe("ended")
    } finally {
      await runtime.dispose()
    }
  }, 60_000)

  it("the journal and the checkpoint store build no path from an id that is not a session id: create and append are refused, reads find nothing, and nothing is made", async () => {
    const { dataDir, root } = nested()
    const runtime = ManagedRuntime.make(layer({ dataDir }))
    try {
      await runtime.runPromise(Effect.flatMap(Sessions, (s) => s.list({ limit: 1 })))
      const before = tree(root)
      await runtime.runPromise(Effect.gen(function*() {
        const journal = yield* Journal
        const checkpoints = yield* Effect.provide(CheckpointStore, CheckpointFiles.layerFile(dataDir).pipe(Layer.provide(FileDriver.layerNode)))
        for (const raw of BAD_IDS) {
          const id = raw as SessionId
          const created = yield* Effect.either(journal.create(id))
          expect(refusal(created)?._tag, `create(${JSON.stringify(raw)})`).toBe("RecordRejected")
          expect(refusal(yield* Effect.either(journal.append(id, [entry("session_ended", {})])))?._tag).toBe("SessionNotFound")
          expect(refusal(yield* Effect.either(journal.read(id, { after: 0, limit: 10 })))?._tag).toBe("SessionNotFound")
          expect(refusal(yield* Effect.either(journal.remove(id)))?._tag).toBe("SessionNotFound")
          expect(yield* journal.exists(id)).toBe(false)
          expect(Option.isNone(yield* checkpoints.load(id))).toBe(true)
          const saved = yield* Effect.either(checkpoints.save(id, { headBytes: 0, rest: [new Uint8Array([1])], head: () => new Uint8Array(0) }))
          expect(refusal(saved)?._tag).toBe("CheckpointWriteFailed")
        }
      }))
      expect(tree(root)).toEqual(before)
    } finally {
      await runtime.dispose()
    }
  }, 60_000)

  it("refuse a turn input of the wrong shape InvalidRequest naming its field under `input`, as HTTP's 400 does, writing nothing; the session works after", async () => {
    const { dataDir } = nested()
    const runtime = ManagedRuntime.make(layer({ dataDir }))
    try {
      await runtime.runPromise(Effect.gen(function*() {
        const s = yield* Sessions
        const { session_id } = yield* s.create({ model: { provider: "scripted" } })
        const cases: ReadonlyArray<readonly [unknown, ReadonlyArray<string | number>]> = [
          [{}, ["input", "message"]],
          [{ nomessage: 1 }, ["input", "nomessage"]],
          [null, ["input"]],
          ["hi", ["input"]],
          [{ message: 42 }, ["input", "message"]],
          [{ message: "x", media: [null] }, ["input", "media", 0]],
          [{ message: "x", bogus: 1 }, ["input", "bogus"]]
        ]
        for (const [input, at] of cases) {
          for (const method of ["send", "submit", "sendKeyed", "submitKeyed"] as const) {
            const before = (yield* s.get(session_id)).last_sequence
            const call: Effect.Effect<unknown, { _tag: string }> = method === "send" || method === "submit"
              ? s[method](session_id, input as never)
              : s[method](session_id, input as never, { key: "k", hash: "h" })
            const refused = refusal(yield* Effect.either(call))
            const label = `${method}(${JSON.stringify(input)})`
            expect(refused?._tag, label).toBe("InvalidRequest")
            expect(refused?.message.startsWith(at.map((k, i) => typeof k === "number" ? `[${k}]` : i === 0 ? k : `.${k}`).join("")), `${label}: ${refused?.message}`).toBe(true)
            expect((refused?.details as ReadonlyArray<{ path: unknown }>)?.map((d) => d.path), label).toContainEqual(at)
            expect((yield* s.get(session_id)).last_sequence, label).toBe(before)
          }
        }
        const outcome = yield* s.send(session_id, { message: "hi" })
        expect(outcome.turn.status).toBe("ended")
      }))
    } finally {
      await runtime.dispose()
    }
  }, 60_000)

  it("refuse a create with a wrong field InvalidRequest naming the field (model.provider, an unexpected field, a transcript's message, tools not a list of objects, no body) with details[].path, as HTTP's 400 does, short, and nothing is created", async () => {
    const { dataDir } = nested()
    const runtime = ManagedRuntime.make(layer({ dataDir }))
    try {
      await runtime.runPromise(Effect.gen(function*() {
        const s = yield* Sessions
        const cases: ReadonlyArray<readonly [unknown, ReadonlyArray<string | number>, string]> = [
          [{ model: { provider: "nope" } }, ["model", "provider"], `model.provider: Expected "scripted", actual "nope"`],
          [{ model: { provider: "scripted" }, bogus: 1 }, ["bogus"], "bogus: is unexpected"],
          [{ model: { provider: "scripted" }, transcript: [{ role: "user", content: 5 }] }, ["transcript", 0], "transcript[0]"],
          [{ model: { provider: "scripted" }, tools: "x" }, ["tools"], "tools: Expected"],
          [{ model: { provider: "scripted" }, tools: [null] }, ["tools", 0], "tools[0]: Expected"],
          [null, [], "Expected a create's body"]
        ]
        for (const [request, at, starts] of cases) {
          const refused = refusal(yield* Effect.either(s.create(request as never)))
          const label = JSON.stringify(request)
          expect(refused?._tag, label).toBe("InvalidRequest")
          expect(refused?.message.startsWith(starts), `${label}: ${refused?.message}`).toBe(true)
          expect(refused!.message.length, label).toBeLessThan(1000)
          const paths = (refused?.details as ReadonlyArray<{ path: ReadonlyArray<unknown> }>).map((d) => d.path)
          expect(paths.some((p) => at.every((k, i) => p[i] === k)), `${label}: ${JSON.stringify(paths)}`).toBe(true)
        }
        expect((yield* s.list({ limit: 10 })).sessions).toEqual([])
      }))
    } finally {
      await runtime.dispose()
    }
  }, 60_000)
})

describe("extensions.models, an application's model provider", () => {
  const reply = (c: ModelCall, seen: Array<unknown>) =>
    Effect.sync(() => {
      seen.push(c.model)
      return { text: "from the application", tool_calls: [], stop_reason: "end" as const }
    })

  it("answers every session's model calls, a scripted one's too, handed the session's model as created; a binding name must be in BRAIN_MODELS, and the provider is handed the name alone", async () => {
    const { dataDir } = nested()
    const seen: Array<unknown> = []
    const models = { call: (c: ModelCall) => reply(c, seen) }
    const bindings = JSON.stringify({ mine: { provider: "openai-chat", model: "x", base_url: "http://127.0.0.1:9/v1" } })
    const runtime = ManagedRuntime.make(layer({ dataDir, models: bindings }, { models }))
    try {
      await runtime.runPromise(Effect.gen(function*() {
        const s = yield* Sessions
        const scripted = yield* s.create({ model: { provider: "scripted", replies: [{ text: "scripted reply" }] } })
        const a = yield* s.send(scripted.session_id, { message: "hi" })
        expect(a.turn.result).toEqual({ text: "from the application" })
        const named = yield* s.create({ model: "mine" })
        const b = yield* s.send(named.session_id, { message: "hi" })
        expect(b.turn.result).toEqual({ text: "from the application" })
        const unbound = refusal(yield* Effect.either(s.create({ model: "theirs" })))
        expect(unbound?._tag).toBe("InvalidRequest")
        expect(unbound?.message).toContain(`no model binding named "theirs"`)
      }))
      expect(seen).toEqual([{ provider: "scripted", replies: [{ text: "scripted reply" }] }, "mine"])
    } finally {
      await runtime.dispose()
    }
  }, 60_000)
})

describe("an application's Sessions calls with values nested past MAX_JSON_DEPTH", () => {
  const deep = (levels: number) => {
    let v: unknown = 1
    for (let i = 0; i < levels; i++) v = [v]
    return v
  }

  it("a create field or a turn's input nested 10,000 or 100,000 deep is refused InvalidRequest naming the field, never a defect, and nothing is written", async () => {
    const { dataDir, root } = nested()
    const runtime = ManagedRuntime.make(layer({ dataDir }))
    try {
      const live = await runtime.runPromise(Effect.flatMap(Sessions, (s) => s.create({ model: { provider: "scripted" } })))
      const before = tree(root)
      for (const levels of [10_000, 100_000]) {
        const creates: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
          [{ model: { provider: "scripted" }, system: deep(levels) }, "system"],
          [{ model: { provider: "scripted", replies: [{ tool_calls: [{ name: "ok", input: deep(levels) }] }] }, tools: [{ name: "ok" }] }, "model"],
          [{ model: { provider: "scripted" }, tools: [{ name: "ok", input_schema: deep(levels) }] }, "tools"]
        ]
        for (const [request, field] of creates) {
          const answer = await runtime.runPromise(Effect.either(Effect.flatMap(Sessions, (s) => s.create(request as never))))
          expect(refusal(answer), `${levels} ${field}`).toMatchObject({ _tag: "InvalidRequest", details: [{ path: [field], message: expect.stringContaining("deeper than 64 levels") }] })
        }
        const input = { message: "go", media: [{ type: "image", url: "https://example.com/a.png", v: deep(levels) }] }
        for (const send of [(s: Sessions["Type"]) => Effect.asVoid(s.send(live.session_id, input as never)), (s: Sessions["Type"]) => Effect.asVoid(s.submit(live.session_id, input as never))]) {
          const answer = await runtime.runPromise(Effect.either(Effect.flatMap(Sessions, send)))
          expect(refusal(answer), `${levels} input`).toMatchObject({ _tag: "InvalidRequest", details: [{ path: ["input"], message: expect.stringContaining("deeper than 64 levels") }] })
        }
      }
      expect(tree(root)).toEqual(before)
    } finally {
      await runtime.dispose()
    }
  }, 120_000)
})
