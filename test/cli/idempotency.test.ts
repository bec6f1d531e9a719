/**
 * The idempotency log's operator path on real files, as child processes: `brain journal verify`
 * checks the log by the server's own rules (read-only; exit 0 clean, 1 torn final write, 2
 * corrupt), and `brain idempotency repair` (server stopped) rebuilds a damaged log from its intact
 * records. A real server on a damaged log refuses keyed requests (503 idempotency_unavailable)
 * and serves the rest; after the repair it replays the kept answers.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as IdempotencyFile from "../../src/layers/IdempotencyFile.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver, layerNode as nodeFiles, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import type { Answer, IdempotencyShape } from "../../src/services/Idempotency.js"
import { framesOf } from "../support/frames.js"
import { tempDir } from "../support/journals.js"
import { BIN, ensureBuilt, request, ROOT, ServerProcess } from "../support/server.js"

const brain = (...args: Array<string>) => {
  const r = spawnSync(process.execPath, [BIN, ...args], { cwd: ROOT, encoding: "utf8", timeout: 30_000 })
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, output: r.stdout + r.stderr }
}

const LOG = "idempotency/claims.log"
const logOf = (dataDir: string) => path.join(dataDir, LOG)
const answer = (body: string): Answer => ({ status: 200, headers: { "content-type": "application/json" }, body })

/** A data directory as a server holds it (journal lock and format marker) with its idempotency store. */
const withServerFiles = <A, E>(dataDir: string, use: (store: IdempotencyShape) => Effect.Effect<A, E>) =>
  Effect.scoped(Effect.gen(function*() {
    yield* JournalFile.make({ dataDir }).pipe(Effect.provide(nodeFiles))
    const store = yield* IdempotencyFile.make({ dataDir, retentionMs: 60_000 }).pipe(Effect.provide(Layer.succeed(FileDriver, nodeDriver)))
    return yield* use(store)
  }))

/** Claims and answers `answered`, only claims `unanswered`. */
const record = (store: IdempotencyShape, answered: ReadonlyArray<string>, unanswered: ReadonlyArray<string> = []) =>
  Effect.gen(function*() {
    for (const k of answered) {
      expect((yield* store.claim("s", k, `h-${k}`))._tag).toBe("Claimed")
      yield* store.complete("s", k, answer(`answer ${k}`))
    }
    for (const k of unanswered) expect((yield* store.claim("s", k, `h-${k}`))._tag).toBe("Claimed")
  })

const flip = (buf: Buffer, at: number) => {
  const out = Buffer.from(buf)
  out[at] = out[at]! ^ 0x40
  return out
}

describe("brain journal verify: the idempotency log", () => {
  beforeAll(ensureBuilt, 120_000)

  it.scopedLive("exits 0 on a clean log, 1 on a torn final write, 2 on a corrupt one, naming the file (relative to the data directory) and the offset, and leaves the log as found", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withServerFiles(dir, (store) => record(store, ["a", "b", "c"]))
      const log = logOf(dir)
      const original = fs.readFileSync(log)
      const frames = framesOf(original)
      expect(frames.length).toBe(6)

      const clean = brain("journal", "verify", dir)
      expect(clean.code, clean.output).toBe(0)
      expect(clean.stdout).toContain(`${LOG}: ok, 6 records`)
      expect(clean.stdout).toContain("verified 0 session(s), the idempotency log, the commit log and the host registrations: clean")

      const torn = original.subarray(0, frames[5]!.start + 9)
      fs.writeFileSync(log, torn)
      const t = brain("journal", "verify", dir)
      expect(t.code, t.output).toBe(1)
      expect(t.stdout).toContain(`${LOG}: torn final write: open would truncate 9 bytes at offset ${frames[5]!.start}`)
      expect(fs.readFileSync(log).equals(torn)).toBe(true)

      const corrupt = flip(original, frames[2]!.start + 20)
      fs.writeFileSync(log, corrupt)
      const c = brain("journal", "verify", dir)
      expect(c.code, c.output).toBe(2)
      expect(c.stdout).toContain(`${LOG}: corrupt at offset ${frames[2]!.start}: frame body checksum mismatch`)
      expect(c.stdout).toContain("brain idempotency repair")
      expect(c.stdout).not.toContain(dir)
      expect(fs.readFileSync(log).equals(corrupt)).toBe(true)
      // A session named on the command line is checked alone.
      expect(brain("journal", "verify", dir, `ses_${"0".repeat(26)}`).stdout).not.toContain(LOG)
    }))
})

describe("brain idempotency repair", () => {
  beforeAll(ensureBuilt, 120_000)

  it.scopedLive("refuses while a server holds the data directory's lock, and changes nothing", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withServerFiles(dir, (store) =>
        Effect.gen(function*() {
          yield* record(store, ["a"])
          const damaged = flip(fs.readFileSync(logOf(dir)), 20)
          fs.writeFileSync(logOf(dir), damaged)
          const r = brain("idempotency", "repair", dir)
          expect(r.code, r.output).toBe(1)
          expect(r.stderr).toContain("stop the server")
          expect(fs.readFileSync(logOf(dir)).equals(damaged)).toBe(true)
          expect(fs.readdirSync(path.join(dir, "idempotency"))).toEqual(["claims.log"])
        }))
    }))

  it.scopedLive("keeps every intact record past damaged bytes: the damaged file is kept aside, the new log verifies clean, kept answers replay, a key whose claim was lost runs again, one whose answer was lost is ambiguous", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withServerFiles(dir, (store) => record(store, ["a", "b", "c", "d"], ["e"]))
      const log = logOf(dir)
      const original = fs.readFileSync(log)
      const frames = framesOf(original)
      expect(frames.map((f) => f.kind).join(",")).toBe("idem_claim,idem_answer,".repeat(4) + "idem_claim")
      // b's claim (frame 2) and c's answer (frame 5) are damaged.
      const damaged = flip(flip(original, frames[2]!.start + 25), frames[5]!.end - 4)
      fs.writeFileSync(log, damaged)

      const r = brain("idempotency", "repair", dir)
      expect(r.code, r.output).toBe(0)
      expect(r.stdout).toContain(`${LOG}: damaged at offset ${frames[2]!.start}`)
      expect(r.stdout).toContain("kept 7 records (4 claims, 3 answers, 0 releases)")
      expect(r.stdout).toContain(`lost ${frames[2]!.end - frames[2]!.start} damaged bytes at offset ${frames[2]!.start}`)
      expect(r.stdout).toContain(`lost ${frames[5]!.end - frames[5]!.start} damaged bytes at offset ${frames[5]!.start}`)
      expect(r.stdout).toContain("forgotten")
      expect(r.stdout).not.toContain(dir)
      const names = fs.readdirSync(path.join(dir, "idempotency")).sort()
      expect(names.length).toBe(2)
      expect(names[0]).toBe("claims.log")
      expect(names[1]).toMatch(/^claims\.log\.damaged-\d{4}-\d\d-\d\dT/)
      expect(r.stdout).toContain(`idempotency/${names[1]}`)
      expect(fs.readFileSync(path.join(dir, "idempotency", names[1]!)).equals(damaged)).toBe(true)
      expect(framesOf(fs.readFileSync(log)).map((f) => f.sequence)).toEqual([1, 2, 3, 4, 5, 6, 7])

      const v = brain("journal", "verify", dir)
      expect(v.code, v.output).toBe(0)
      expect(v.stdout).toContain(`${LOG}: ok, 7 records`)
      const again = brain("idempotency", "repair", dir)
      expect(again.code, again.output).toBe(0)
      expect(again.stdout).toContain("nothing to repair")

      yield* withServerFiles(dir, (store) =>
        Effect.gen(function*() {
          for (const k of ["a", "d"]) expect(yield* store.claim("s", k, `h-${k}`)).toEqual({ _tag: "Replay", answer: answer(`answer ${k}`) })
          expect(yield* store.claim("s", "b", "h-b")).toEqual({ _tag: "Claimed" })
          expect(yield* store.claim("s", "c", "h-c")).toEqual({ _tag: "Ambiguous", inFlight: false })
          expect(yield* store.claim("s", "e", "h-e")).toEqual({ _tag: "Ambiguous", inFlight: false })
        }))
    }))
})

describe("a server on a damaged idempotency log", () => {
  let server: ServerProcess | undefined
  beforeAll(ensureBuilt, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("starts, says so naming the file and offset, refuses keyed requests with 503 idempotency_unavailable and serves the rest; after a repair it replays the kept answers", async () => {
    server = await new ServerProcess().start()
    const s = server
    const create = (system: string, key?: string) =>
      request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" }, system }, headers: key ? { "idempotency-key": key } : {} })
    const first = await create("one", "k1")
    const second = await create("two", "k2")
    const third = await create("three", "k3")
    for (const r of [first, second, third]) expect(r.status, r.text).toBe(201)
    await s.stop()

    const log = logOf(s.dataDir)
    const frames = framesOf(fs.readFileSync(log))
    expect(frames.length).toBe(6)
    // The second request's claim is damaged.
    fs.writeFileSync(log, flip(fs.readFileSync(log), frames[2]!.start + 30))

    await s.start()
    expect(s.output).toContain(`${LOG} is damaged at offset ${frames[2]!.start}`)
    expect(s.output).toContain("brain idempotency repair")
    const refused = await create("one", "k1")
    expect(refused.status, refused.text).toBe(503)
    expect(refused.body).toMatchObject({ code: "idempotency_unavailable", retryable: false })
    expect(refused.body.message).toContain(`${LOG} is damaged at offset ${frames[2]!.start}`)
    expect(refused.body.message).toContain("brain idempotency repair")
    expect(refused.body.message).not.toContain(s.dataDir)
    const unkeyed = await create("four")
    expect(unkeyed.status, unkeyed.text).toBe(201)
    expect((await request(s.baseUrl, `/v1/sessions/${unkeyed.body.session_id}`)).status).toBe(200)
    expect(brain("journal", "verify", s.dataDir).code).toBe(2)
    await s.stop()

    const repaired = brain("idempotency", "repair", s.dataDir)
    expect(repaired.code, repaired.output).toBe(0)
    expect(brain("journal", "verify", s.dataDir).code).toBe(0)
    await s.start()
    expect((await create("one", "k1")).text).toBe(first.text)
    expect((await create("three", "k3")).text).toBe(third.text)
    // The key whose claim was lost is forgotten: its retry runs again (a new session).
    const rerun = await create("two", "k2")
    expect(rerun.status).toBe(201)
    expect(rerun.body.session_id).not.toBe(second.body.session_id)
  }, 60_000)
})
