/**
 * A sync send over HTTP whose turn's first write fails (the disk is full): 200 with the turn
 * failed `journal_write_failed`, naming no turn sequence (0) and not ambiguous, since nothing of
 * the turn was written or sent. Once the disk has room, a retry with the same Idempotency-Key
 * runs, and takes the sequence the refused send did not. The file journal runs over a
 * fault-injecting driver (ENOSPC to every write of the session until freed), behind the real
 * routes and handlers.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServer from "@effect/platform/HttpServer"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { Admission, apiLive } from "../../src/http/Handlers.js"
import * as IdempotencyMemory from "../../src/layers/IdempotencyMemory.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver } from "../../src/layers/journal/FileDriver.js"
import { Hosts } from "../../src/services/Hosts.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import { Sessions } from "../../src/services/Sessions.js"
import { instrumentedDriver, tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

/** A service no route under test calls: any use of it is a defect. */
const untouched = <S>() => new Proxy({}, { get: () => () => Effect.die("not called") }) as S

describe("a sync send refused by a full disk, over HTTP", () => {
  it.scoped("a send whose turn's first write fails is answered with turn sequence 0, not ambiguous, and a retry with its key runs once the disk has room", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const inst = instrumentedDriver()
      const journal = JournalFile.layer({ dataDir: dir, lockWaitMs: 0 }).pipe(
        Layer.provide(Layer.succeed(FileDriver, inst.driver)),
        Layer.orDie
      )
      const context = yield* Layer.build(runtimeLayer({ journal }))
      const { handler, dispose } = HttpApiBuilder.toWebHandler(
        Layer.mergeAll(
          apiLive(new Admission()).pipe(
            Layer.provide(Layer.mergeAll(
              // No route under test uses Hosts; the runtime's own wins where it has one.
              Layer.succeed(Hosts, untouched()),
              Layer.succeedContext(context),
              IdempotencyMemory.layer({ retentionMs: 60_000 }),
              ServerConfig.layerWith({})
            ))
          ),
          HttpServer.layerContext
        )
      )
      yield* Effect.addFinalizer(() => Effect.promise(() => dispose()))
      const call = (method: string, path: string, body?: unknown, key?: string) =>
        Effect.promise(async () => {
          const r = await handler(new Request(`http://brain${path}`, {
            method,
            headers: { "content-type": "application/json", ...(key ? { "idempotency-key": key } : {}) },
            ...(body === undefined ? {} : { body: JSON.stringify(body) })
          }))
          return { status: r.status, body: await r.json() as any }
        })

      const { session_id } = yield* Context.get(context, Sessions).create({ model: { provider: "scripted" } })
      inst.diskFull(session_id)
      const a = yield* call("POST", `/v1/sessions/${session_id}/messages`, { input: { message: "A" } }, "ka")
      expect(a.status).toBe(200)
      expect(a.body.last_sequence).toBe(2)
      expect(a.body.turn).toMatchObject({
        sequence: 0,
        status: "failed",
        failure: { code: "journal_write_failed", retryable: false, ambiguous: false }
      })
      expect(a.body.turn.failure.message).toMatch(/^the turn could not be started: .*ENOSPC/)

      inst.diskFreed(session_id)
      const retried = yield* call("POST", `/v1/sessions/${session_id}/messages`, { input: { message: "A" } }, "ka")
      expect(retried.status).toBe(200)
      expect(retried.body.turn).toMatchObject({ sequence: 3, status: "ended" })
      const events = yield* call("GET", `/v1/sessions/${session_id}/events?after=2&limit=1`)
      expect(events.body.events[0]).toMatchObject({ sequence: 3, kind: "turn_started", data: { input: { message: "A" } } })
    }))
})
