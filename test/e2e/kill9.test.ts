/**
 * A real `kill -9`: a child process (test/fixtures/appender.mjs, running the compiled journal)
 * appends from several concurrent appenders and prints each acknowledged append; the test kills
 * it at a random moment, reopens the data directory in-process and checks what survived, then
 * starts the next child on the same directory. Repeated so the kill lands in many places: between
 * rounds, inside a write, inside an fdatasync, during a rotation-free append of three records.
 */
import { execSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import type { JournalRecord } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { layerNode as nodeFiles } from "../../src/layers/journal/FileDriver.js"
import { tempDir } from "../support/journals.js"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const FIXTURE = path.join(ROOT, "test/fixtures/appender.mjs")

/** Kills per test run: each one a separate crash and recovery of the same data directory. */
const KILLS = 20
/** Milliseconds after the child's first ack before SIGKILL, drawn uniformly. */
const KILL_AFTER_MS = { min: 50, max: 400 }
/** Milliseconds a child may take to start and acknowledge its first append. */
const FIRST_ACK_DEADLINE_MS = 20_000
/** Bytes. Small segments, so that kills also land around rotations (a new file, a directory sync). */
const ROTATE_BYTES = 256 * 1024

interface Ack {
  readonly first: number
  readonly count: number
  readonly key: string
}

interface ChildRun {
  /** lastSequence the child saw when it opened the journal. */
  readonly opened: number
  readonly acks: ReadonlyArray<Ack>
  readonly signal: NodeJS.Signals | null
  readonly code: number | null
  readonly stderr: string
}

/** `npm test` builds first; a direct `vitest run` of this file builds only when dist is missing. */
const ensureBuilt = () => {
  if (!fs.existsSync(path.join(ROOT, "dist/layers/JournalFile.js"))) {
    execSync("npm run build", { cwd: ROOT, stdio: "inherit" })
  }
}

/** Runs one appender and SIGKILLs it `killAfterMs` after its first acknowledged append. */
const runAndKill = (dataDir: string, session: string, run: number, killAfterMs: number) =>
  Effect.async<ChildRun, Error>((resume) => {
    const child = spawn(process.execPath, [FIXTURE, dataDir, session, String(run), String(ROTATE_BYTES)], {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "pipe"]
    })
    const acks: Array<Ack> = []
    let opened = -1
    let pending = ""
    let stderr = ""
    let killTimer: NodeJS.Timeout | undefined
    const deadline = setTimeout(() => child.kill("SIGKILL"), FIRST_ACK_DEADLINE_MS)
    child.stdout.setEncoding("utf8")
    child.stdout.on("data", (chunk: string) => {
      pending += chunk
      const lines = pending.split("\n")
      pending = lines.pop()!
      for (const line of lines) {
        const [word, a, b, key] = line.split(" ")
        if (word === "open") opened = Number(a)
        else if (word === "ack") {
          acks.push({ first: Number(a), count: Number(b), key: key! })
          if (killTimer === undefined) {
            clearTimeout(deadline)
            killTimer = setTimeout(() => child.kill("SIGKILL"), killAfterMs)
          }
        }
      }
    })
    child.stderr.setEncoding("utf8")
    child.stderr.on("data", (chunk: string) => void (stderr += chunk))
    child.on("error", (err) => resume(Effect.fail(err)))
    // "close" comes after the exit and after stdout has been read to its end.
    child.on("close", (code, signal) => {
      clearTimeout(deadline)
      clearTimeout(killTimer)
      resume(Effect.succeed({ opened, acks, signal, code, stderr }))
    })
    return Effect.sync(() => {
      clearTimeout(deadline)
      clearTimeout(killTimer)
      child.kill("SIGKILL")
    })
  })

/** Every record of the session, read in pages. */
const readAll = (dataDir: string, session: SessionId) =>
  Effect.scoped(
    Effect.gen(function*() {
      // lockWaitMs 0: the killed child's lock must be recognised as stale at once, not waited out.
      const journal = yield* JournalFile.make({ dataDir, lockWaitMs: 0, limits: { rotateBytes: ROTATE_BYTES } }).pipe(
        Effect.provide(nodeFiles)
      )
      const last = yield* journal.lastSequence(session)
      const records: Array<JournalRecord> = []
      while (records.length < last) {
        const page = yield* journal.read(session, { after: records.length, limit: 5000 })
        if (page.length === 0) break
        records.push(...page)
      }
      return { last, records }
    })
  )

describe("kill -9 of a process appending to the file journal", () => {
  beforeAll(ensureBuilt, 120_000)

  it.scopedLive(`after each of ${KILLS} SIGKILLs: every acknowledged append survives, sequences stay dense, multi-record appends are all or nothing, and the stale lock does not block the restart`, () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("brain-kill9-")
      const session = yield* mintSessionId
      const lock = path.join(dir, "lock")
      const acked: Array<Ack> = []
      let verifiedLast = 0

      for (let run = 1; run <= KILLS; run++) {
        const killAfter = KILL_AFTER_MS.min + Math.floor(Math.random() * (KILL_AFTER_MS.max - KILL_AFTER_MS.min + 1))
        const child = yield* runAndKill(dir, session, run, killAfter)
        const what = `run ${run} (killed ${killAfter} ms after its first ack)`
        expect(child.signal, `${what}: ${child.stderr}`).toBe("SIGKILL")
        expect(child.acks.length, `${what}: ${child.stderr}`).toBeGreaterThan(0)
        // The child's own open found exactly what the last verification found.
        expect(child.opened, what).toBe(verifiedLast)
        acked.push(...child.acks)

        // The killed child could not release its lock; the reopen below must take it over at once.
        expect(fs.existsSync(lock), `${what}: the killed child left its lock`).toBe(true)
        const { last, records } = yield* readAll(dir, session)
        expect(fs.existsSync(lock), `${what}: the lock is released after the reopen`).toBe(false)

        // Dense 1..last, in order.
        expect(records.length, what).toBe(last)
        for (let i = 0; i < records.length; i++) {
          if (records[i]!.sequence !== i + 1) expect.fail(`${what}: record ${i} has sequence ${records[i]!.sequence}`)
        }
        expect(last, what).toBeGreaterThanOrEqual(verifiedLast)

        // Every acknowledged append, from this run and every earlier one, is there, whole.
        for (const ack of acked) {
          for (let i = 0; i < ack.count; i++) {
            const r = records[ack.first + i - 1]
            if (!r || r.payload.key !== ack.key || r.payload.value.i !== i || r.payload.value.of !== ack.count) {
              expect.fail(`${what}: acknowledged ${ack.key} [${i}/${ack.count}] at ${ack.first + i} reads back as ${JSON.stringify(r)}`)
            }
          }
        }

        // Acknowledged or not, every append in the journal is whole, and each appears once.
        const keys = new Set<string>()
        for (let i = 0; i < records.length;) {
          const { key, value } = records[i]!.payload
          if (value.i !== 0 || keys.has(key)) expect.fail(`${what}: ${key} [${value.i}/${value.of}] at ${i + 1} does not start a new append`)
          keys.add(key)
          for (let j = 0; j < value.of; j++) {
            const r = records[i + j]
            if (!r || r.payload.key !== key || r.payload.value.i !== j || r.payload.value.of !== value.of) {
              expect.fail(`${what}: append ${key} of ${value.of} is broken at ${i + j + 1}: ${JSON.stringify(r)}`)
            }
          }
          i += value.of
        }
        verifiedLast = last
      }
      expect(acked.some((a) => a.count === 3)).toBe(true)
      expect(acked.some((a) => a.count === 1)).toBe(true)
    }), 120_000)
})
