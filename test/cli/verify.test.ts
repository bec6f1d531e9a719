/**
 * The operator CLI on real files, as a child process: `brain journal verify <dir> [session]`
 * (exit 0 clean, 1 torn final write, 2 corrupt, 74 cannot read) and `brain journal dump <dir> <session>`.
 * Both are read-only: they report what an open would truncate and never truncate it.
 */
import { execFile, execSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { entry, type Entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { layerNode as nodeFiles } from "../../src/layers/journal/FileDriver.js"
import type { JournalShape } from "../../src/services/Journal.js"
import { checkpointFile, wellFramed } from "../support/frames.js"
import { forgetCommitLog, tempDir } from "../support/journals.js"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const BIN = path.join(ROOT, "bin/brain.js")

/** `npm test` builds first; a direct `vitest run` of this file builds only when dist is missing. */
const ensureBuilt = () => {
  if (!fs.existsSync(path.join(ROOT, "dist/cli/main.js"))) execSync("npm run build", { cwd: ROOT, stdio: "inherit" })
}

const brain = (...args: Array<string>) => {
  const r = spawnSync(process.execPath, [BIN, ...args], { cwd: ROOT, encoding: "utf8", timeout: 30_000 })
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, output: r.stdout + r.stderr }
}

const kv = (key: string, value: unknown) => entry("kv_put", { key, value })

const withJournal = <A, E>(dataDir: string, use: (journal: JournalShape) => Effect.Effect<A, E>, rotateBytes?: number) =>
  Effect.scoped(
    Effect.flatMap(
      JournalFile.make({ dataDir, ...(rotateBytes ? { limits: { rotateBytes } } : {}) }).pipe(Effect.provide(nodeFiles)),
      use
    )
  )

const writeSession = (dataDir: string, session: SessionId, appends: ReadonlyArray<ReadonlyArray<Entry>>, rotateBytes?: number) =>
  withJournal(dataDir, (journal) =>
    Effect.gen(function*() {
      yield* journal.create(session)
      for (const entries of appends) yield* journal.append(session, entries)
    }), rotateBytes).pipe(Effect.tap(() => Effect.sync(() => forgetCommitLog(dataDir))))

const simple = (n: number) => Array.from({ length: n }, (_, i) => [kv(`k${i + 1}`, { i: i + 1 })])

const segmentsOf = (dataDir: string, session: SessionId) => {
  const dir = path.join(dataDir, "sessions", session, "journal")
  return fs.readdirSync(dir).filter((n) => n.endsWith(".seg")).sort().map((n) => path.join(dir, n))
}

/** Start offsets of the frames in a segment (u32 LE body length, then 8 bytes of checksums). */
const frameStarts = (buf: Buffer) => {
  const out: Array<number> = []
  for (let offset = 0; offset + 12 <= buf.length;) {
    out.push(offset)
    offset += 12 + buf.readUInt32LE(offset)
  }
  return out
}

describe("brain journal verify", () => {
  beforeAll(ensureBuilt, 120_000)

  it.scopedLive("exits 0 on clean sessions, for the whole directory and for one session, without taking the lock", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const a = yield* mintSessionId
      const b = yield* mintSessionId
      yield* writeSession(dir, a, simple(5))
      yield* writeSession(dir, b, simple(40).map(([e]) => [kv(e!.payload.key, "z".repeat(300))]), 4096)
      expect(segmentsOf(dir, b).length).toBeGreaterThan(1)

      // While a server holds the directory: verify reads, it does not wait for or take the lock.
      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.lastSequence(a)
          const lockBefore = fs.readFileSync(path.join(dir, "lock"), "utf8")
          const all = brain("journal", "verify", dir)
          expect(all.code, all.output).toBe(0)
          expect(all.stdout).toContain(`${a}: ok, 5 records`)
          expect(all.stdout).toContain(`${b}: ok, 40 records`)
          const one = brain("journal", "verify", dir, a)
          expect(one.code, one.output).toBe(0)
          expect(one.stdout).not.toContain(b)
          expect(fs.readFileSync(path.join(dir, "lock"), "utf8")).toBe(lockBefore)
        }))
    }))

  it.scopedLive("exits 1 on a torn final write, naming the file and the offset open would truncate to, and modifies nothing", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSession(dir, s, [...simple(3), [kv("b", 1), kv("c", 2), kv("d", 3)]])
      const [seg] = segmentsOf(dir, s)
      const original = fs.readFileSync(seg!)
      const starts = frameStarts(original)
      expect(starts.length).toBe(6)
      const groupStart = starts[3]!

      const cases = {
        "a cut inside the last frame": original.subarray(0, original.length - 7),
        "a cut right after the second frame of an atomic append": original.subarray(0, starts[5]!),
        "a zero-filled tail": Buffer.concat([original.subarray(0, groupStart), Buffer.alloc(4096)])
      }
      for (const [name, bytes] of Object.entries(cases)) {
        fs.writeFileSync(seg!, bytes)
        const mtime = fs.statSync(seg!).mtimeMs
        for (const args of [[dir], [dir, s]]) {
          const r = brain("journal", "verify", ...args)
          expect(r.code, `${name}: ${r.output}`).toBe(1)
          expect(r.stdout, name).toContain(seg!)
          expect(r.stdout, name).toContain(`offset ${groupStart}`)
          expect(r.stdout, name).toContain(`truncate ${bytes.length - groupStart} bytes`)
        }
        // Verify did not repair anything.
        expect(fs.statSync(seg!).size, name).toBe(bytes.length)
        expect(fs.readFileSync(seg!).equals(bytes), name).toBe(true)
        expect(fs.statSync(seg!).mtimeMs, name).toBe(mtime)
      }

      // The offset verify reported is exactly where open truncates; afterwards verify is clean.
      const last = yield* withJournal(dir, (journal) => journal.lastSequence(s))
      expect(last).toBe(3)
      expect(fs.statSync(seg!).size).toBe(groupStart)
      const after = brain("journal", "verify", dir, s)
      expect(after.code, after.output).toBe(0)
    }))

  it.scopedLive("a segment cut short while the commit log still holds its writes (a power loss) is reported with a note that the server's start may mend it, and after a start and stop it is clean and whole", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      // The commit log as a crash at the end of these appends leaves it (a clean stop empties it).
      const logs = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          for (const entries of simple(4)) yield* journal.append(s, entries)
          return ["a.log", "b.log"].map((n) => [n, fs.readFileSync(path.join(dir, "commit-log", n))] as const)
        }))
      for (const [n, bytes] of logs) fs.writeFileSync(path.join(dir, "commit-log", n), bytes)
      const [seg] = segmentsOf(dir, s)
      const whole = fs.readFileSync(seg!)
      fs.truncateSync(seg!, whole.length - 7)
      const before = brain("journal", "verify", dir)
      expect(before.code, before.output).toBe(1)
      expect(before.stdout).toContain("note: the commit log holds")
      yield* withJournal(dir, (journal) => journal.lastSequence(s))
      expect(fs.readFileSync(seg!).equals(whole)).toBe(true)
      const after = brain("journal", "verify", dir)
      expect(after.code, after.output).toBe(0)
      expect(after.stdout).not.toContain("note:")
    }))

  it.scopedLive("exits 2 on a corrupt session, naming the file and offset; corruption outranks a torn write, and files are left as found", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const corrupt = yield* mintSessionId
      const torn = yield* mintSessionId
      const clean = yield* mintSessionId
      for (const s of [corrupt, torn, clean]) yield* writeSession(dir, s, simple(5))

      const [corruptSeg] = segmentsOf(dir, corrupt)
      const bad = fs.readFileSync(corruptSeg!)
      const middle = frameStarts(bad)[2]!
      bad[middle + 25] = bad[middle + 25]! ^ 0x40
      fs.writeFileSync(corruptSeg!, bad)
      const [tornSeg] = segmentsOf(dir, torn)
      const tornSize = fs.statSync(tornSeg!).size - 2
      fs.truncateSync(tornSeg!, tornSize)

      const all = brain("journal", "verify", dir)
      expect(all.code, all.output).toBe(2)
      expect(all.stdout).toContain(`${corrupt}: corrupt: ${corruptSeg} offset ${middle}:`)
      expect(all.stdout).toContain(`${torn}: torn final write`)
      expect(all.stdout).toContain(`${clean}: ok`)

      const one = brain("journal", "verify", dir, corrupt)
      expect(one.code, one.output).toBe(2)
      expect(one.stdout).toContain(corruptSeg!)
      expect(one.stdout).toContain(`offset ${middle}`)
      expect(brain("journal", "verify", dir, torn).code).toBe(1)
      expect(brain("journal", "verify", dir, clean).code).toBe(0)

      expect(fs.readFileSync(corruptSeg!).equals(bad)).toBe(true)
      expect(fs.statSync(tornSeg!).size).toBe(tornSize)

      // Not a Brain data directory at all.
      const other = yield* tempDir()
      fs.writeFileSync(path.join(other, "notes.txt"), "x")
      expect(brain("journal", "verify", other).code).toBe(2)
    }))
})


describe("brain journal verify and remove: a well-framed record that cannot be read", () => {
  beforeAll(ensureBuilt, 120_000)

  it.scopedLive("a final frame whose checksums hold but whose record is not JSON, of an unknown kind or against its schema: verify exits 2 naming the file and offset, and remove takes the session away", () =>
    Effect.gen(function*() {
      const cases = [
        { name: "not JSON", kind: "kv_put", json: "{not json" },
        { name: "unknown kind", kind: "bogus_kind", json: "{}" },
        { name: "against its schema", kind: "turn_ended", json: `{"sequence":"x"}` }
      ]
      for (const c of cases) {
        const dir = yield* tempDir()
        const s = yield* mintSessionId
        yield* writeSession(dir, s, simple(5))
        const [seg] = segmentsOf(dir, s)
        const offset = fs.statSync(seg!).size
        fs.appendFileSync(seg!, wellFramed(6, c.kind, c.json))
        const r = brain("journal", "verify", dir, s)
        expect(r.code, `${c.name}: ${r.output}`).toBe(2)
        expect(r.stdout, c.name).toContain(`${s}: corrupt: ${seg} offset ${offset}: unreadable record`)
        const removed = brain("journal", "remove", dir, s)
        expect(removed.code, `${c.name}: ${removed.output}`).toBe(0)
        expect(fs.existsSync(path.join(dir, "sessions", s)), c.name).toBe(false)
      }
    }))

  it.scopedLive("verify checks every record, those a valid checkpoint covers too: one that cannot be read exits 2 naming its file and offset, and remove takes the session away", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSession(dir, s, simple(100))
      const [covered] = yield* withJournal(dir, (journal) => journal.read(s, { after: 89, limit: 1 }))
      forgetCommitLog(dir)
      fs.writeFileSync(path.join(dir, "sessions", s, "checkpoint"), checkpointFile(s, covered!))
      const [seg] = segmentsOf(dir, s)
      const original = fs.readFileSync(seg!)
      const starts = frameStarts(original)
      fs.writeFileSync(seg!, Buffer.concat([original.subarray(0, starts[9]!), wellFramed(10, "turn_ended", `{"sequence":"x"}`), original.subarray(starts[10]!)]))
      const r = brain("journal", "verify", dir, s)
      expect(r.code, r.output).toBe(2)
      expect(r.stdout).toContain(`${s}: corrupt: ${seg} offset ${starts[9]}: unreadable record`)
      const removed = brain("journal", "remove", dir, s)
      expect(removed.code, removed.output).toBe(0)
      expect(fs.existsSync(path.join(dir, "sessions", s))).toBe(false)
    }))
})

describe("brain journal verify and remove: the residue of a cut-off creation", () => {
  beforeAll(ensureBuilt, 120_000)

  it.scopedLive("a session directory with no journal, or a journal with no record, is named as residue and is not corruption; remove takes it away and refuses a session with records", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const clean = yield* mintSessionId
      yield* writeSession(dir, clean, simple(3))
      // What kill -9 leaves when it lands inside a create: before the journal directory, or before the first record.
      const noRecord = yield* mintSessionId
      yield* withJournal(dir, (journal) => journal.create(noRecord))
      expect(segmentsOf(dir, noRecord).map((f) => fs.statSync(f).size)).toEqual([0])
      const noJournal = yield* mintSessionId
      fs.mkdirSync(path.join(dir, "sessions", noJournal))
      // What kill -9 leaves when it lands inside a delete: an empty journal directory in an empty session directory.
      const emptyJournal = yield* mintSessionId
      fs.mkdirSync(path.join(dir, "sessions", emptyJournal, "journal"), { recursive: true })

      const all = brain("journal", "verify", dir)
      expect(all.code, all.output).toBe(0)
      expect(all.stdout).toContain(`${noJournal}: not a session: empty directories, left by a creation or a delete cut off by a crash; the server answers not_found`)
      expect(all.stdout).toContain(`${emptyJournal}: not a session: empty directories, left by a creation or a delete cut off by a crash`)
      expect(all.stdout).toContain(`${noRecord}: not a session: the residue of a creation cut off before its first record`)
      expect(all.stdout).toContain(`${clean}: ok, 3 records`)
      expect(all.stdout).toContain("clean")
      expect(brain("journal", "verify", dir, noRecord).code).toBe(0)

      for (const s of [noJournal, noRecord, emptyJournal]) {
        const removed = brain("journal", "remove", dir, s)
        expect(removed.code, removed.output).toBe(0)
        expect(removed.stdout).toContain(`${s}: removed (not a session`)
        expect(fs.existsSync(path.join(dir, "sessions", s))).toBe(false)
      }
      const refused = brain("journal", "remove", dir, clean)
      expect(refused.code, refused.output).toBe(2)
      expect(fs.existsSync(path.join(dir, "sessions", clean))).toBe(true)
    }))
})

describe("brain journal dump", () => {
  beforeAll(ensureBuilt, 120_000)

  it.scopedLive("prints one JSON object per line, equal to the records a read returns, across segments and pages", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      const records = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          yield* journal.append(s, [
            entry("session_creation_started", { configuration: { agentloop: "official", model: { provider: "scripted" } } })
          ])
          yield* journal.append(s, [
            entry("transcript_delta", { keep: 0, append: [{ role: "user", content: "line one\nline two — ünïcødé ✓" }] }),
            kv("nested", { a: [1, 2, { b: null }], s: "\u2028 and \"quotes\"" })
          ])
          // Enough records for more than one dump page (1000) and several segments.
          yield* Effect.forEach(
            Array.from({ length: 1200 }, (_, i) => i),
            (i) => journal.append(s, [kv(`k${i}`, i)]),
            { concurrency: 64, discard: true }
          )
          return yield* journal.read(s, { after: 0, limit: 10_000 })
        }), 16 * 1024)
      expect(records.length).toBe(1203)
      expect(segmentsOf(dir, s).length).toBeGreaterThan(1)

      const r = brain("journal", "dump", dir, s)
      expect(r.code, r.stderr).toBe(0)
      expect(r.stdout.endsWith("\n")).toBe(true)
      const lines = r.stdout.slice(0, -1).split("\n")
      expect(lines.length).toBe(records.length)
      expect(lines.map((line) => JSON.parse(line))).toEqual(records.map((rec) => ({ ...rec })))
    }))

  it.scopedLive("dump through a pipe whose reader starts late prints every record, not only what fits the pipe's buffer", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      // About 600 KiB of records: many times a pipe's 64 KiB buffer.
      const records = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          for (let i = 0; i < 300; i++) yield* journal.append(s, [kv(`k${i}`, "x".repeat(2000))])
          return yield* journal.read(s, { after: 0, limit: 10_000 })
        }))
      // The reader sleeps first, so the dump fills the pipe and must wait for it before exiting.
      // (Spawned without blocking this worker: a long synchronous spawn stalls vitest's own calls.)
      const r = yield* Effect.async<{ code: number | null; stdout: string; stderr: string }>((resume) => {
        execFile("sh", ["-c", `"${process.execPath}" "${BIN}" journal dump "${dir}" "${s}" | (sleep 1; cat)`], { cwd: ROOT, encoding: "utf8", timeout: 60_000, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) =>
          resume(Effect.succeed({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, stdout, stderr })))
      })
      expect(r.code, r.stderr).toBe(0)
      const lines = r.stdout.slice(0, -1).split("\n")
      expect(lines.length).toBe(records.length)
      expect(lines.map((line) => JSON.parse(line))).toEqual(records.map((rec) => ({ ...rec })))
    }))

  it.scopedLive("dump of a journal far larger than its heap prints every record, whole and in order, within that heap", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      // 30 records of 4 MiB: 120 MiB of journal, dumped by a process held to a 64 MiB heap.
      const big = "x".repeat(4 * 1024 * 1024)
      const count = 30
      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          for (let i = 0; i < count; i++) yield* journal.append(s, [kv(`k${i}`, big)])
        }))
      const out = path.join(dir, "dump.jsonl")
      const fd = fs.openSync(out, "w")
      const r = spawnSync(process.execPath, ["--max-old-space-size=64", BIN, "journal", "dump", dir, s], {
        cwd: ROOT,
        encoding: "utf8",
        timeout: 120_000,
        stdio: ["ignore", fd, "pipe"]
      })
      fs.closeSync(fd)
      expect(r.status, r.stderr).toBe(0)
      const lines = fs.readFileSync(out, "utf8").split("\n")
      expect(lines.pop()).toBe("")
      expect(lines.length).toBe(count)
      lines.forEach((line, i) => {
        const record = JSON.parse(line)
        expect(record.sequence).toBe(i + 1)
        expect(record.payload.key).toBe(`k${i}`)
        expect(record.payload.value).toBe(big)
      })
    }), 180_000)

  it.scopedLive("dump of a torn session prints the committed records only and leaves the file as is; of a corrupt one, prints the intact records before the damage, then exits 2 naming file and offset", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const torn = yield* mintSessionId
      const corrupt = yield* mintSessionId
      yield* writeSession(dir, torn, simple(4))
      yield* writeSession(dir, corrupt, simple(4))

      const [tornSeg] = segmentsOf(dir, torn)
      fs.truncateSync(tornSeg!, fs.statSync(tornSeg!).size - 5)
      const tornSize = fs.statSync(tornSeg!).size
      const t = brain("journal", "dump", dir, torn)
      expect(t.code, t.stderr).toBe(0)
      const lines = t.stdout.trim().split("\n").map((line) => JSON.parse(line))
      expect(lines.map((l) => l.sequence)).toEqual([1, 2, 3])
      expect(lines.map((l) => l.payload)).toEqual([1, 2, 3].map((i) => ({ key: `k${i}`, value: { i } })))
      expect(fs.statSync(tornSeg!).size).toBe(tornSize)

      const [corruptSeg] = segmentsOf(dir, corrupt)
      const bytes = fs.readFileSync(corruptSeg!)
      const second = frameStarts(bytes)[1]!
      bytes[second + 3] = bytes[second + 3]! ^ 0x01
      fs.writeFileSync(corruptSeg!, bytes)
      const c = brain("journal", "dump", dir, corrupt)
      expect(c.code).toBe(2)
      expect(c.stdout.trim().split("\n").map((line) => JSON.parse(line))).toEqual([
        expect.objectContaining({ sequence: 1, kind: "kv_put", payload: { key: "k1", value: { i: 1 } } })
      ])
      expect(c.stderr).toContain(corruptSeg!)
      expect(c.stderr).toContain(`offset ${second}`)
    }))
})

describe("brain journal remove: what only the commit log holds", () => {
  beforeAll(ensureBuilt, 120_000)

  it.scopedLive("a session damaged where the commit log still holds its writes (a power loss) is not removed: remove refuses (exit 1) saying to start and stop the server first, and after that the session is whole", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      const other = yield* mintSessionId
      // The commit log as a crash at the end of these appends leaves it (a clean stop empties it).
      const logs = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          for (const session of [s, other]) yield* journal.create(session)
          for (const entries of simple(6)) {
            yield* journal.append(s, entries)
            yield* journal.append(other, entries)
          }
          return ["a.log", "b.log"].map((n) => [n, fs.readFileSync(path.join(dir, "commit-log", n))] as const)
        }))
      for (const [n, bytes] of logs) fs.writeFileSync(path.join(dir, "commit-log", n), bytes)
      // A page of the segment lost to a power loss (zeros), the writes after it intact: corrupt as it stands.
      const [seg] = segmentsOf(dir, s)
      const whole = fs.readFileSync(seg!)
      const damaged = Buffer.from(whole)
      const third = frameStarts(damaged)[2]!
      damaged.fill(0, third, frameStarts(damaged)[3]!)
      fs.writeFileSync(seg!, damaged)
      const before = brain("journal", "verify", dir, s)
      expect(before.code, before.output).toBe(2)

      const refused = brain("journal", "remove", dir, s)
      expect(refused.code, refused.output).toBe(1)
      expect(refused.stderr).toContain("commit log")
      expect(refused.stderr).toMatch(/Start the server and stop it.*verify again/)
      expect(fs.readFileSync(seg!).equals(damaged)).toBe(true)

      // The start the message asks for writes the log back: the session is whole and verify is clean.
      expect(yield* withJournal(dir, (journal) => journal.lastSequence(s))).toBe(6)
      expect(fs.readFileSync(seg!).equals(whole)).toBe(true)
      const after = brain("journal", "verify", dir)
      expect(after.code, after.output).toBe(0)
    }))

  it.scopedLive("once the commit log holds nothing of a corrupt session, remove takes it away, whatever the log holds of other sessions", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      const other = yield* mintSessionId
      yield* writeSession(dir, s, simple(4))
      // A crash while another session was written: the log holds that session's writes only.
      const logs = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(other)
          for (const entries of simple(3)) yield* journal.append(other, entries)
          return ["a.log", "b.log"].map((n) => [n, fs.readFileSync(path.join(dir, "commit-log", n))] as const)
        }))
      for (const [n, bytes] of logs) fs.writeFileSync(path.join(dir, "commit-log", n), bytes)
      const [seg] = segmentsOf(dir, s)
      const bad = fs.readFileSync(seg!)
      const second = frameStarts(bad)[1]!
      bad[second + 25] = bad[second + 25]! ^ 0x40
      fs.writeFileSync(seg!, bad)
      const removed = brain("journal", "remove", dir, s)
      expect(removed.code, removed.output).toBe(0)
      expect(fs.existsSync(path.join(dir, "sessions", s))).toBe(false)
      expect(fs.existsSync(path.join(dir, "sessions", other))).toBe(true)
    }))
})

/**
 * A segment this process cannot read, for real: as root (who reads every file) the command runs as
 * `nobody` over a data directory that `nobody` owns but for that segment, root's with mode 600 (a
 * session directory restored by root with umask 077); as another user, the segment's mode is 000.
 */
const asService = (dataDir: string, unreadable: string) => {
  const root = process.getuid?.() === 0
  if (root) {
    const walk = (at: string) => {
      fs.chownSync(at, 65534, 65534)
      if (fs.statSync(at).isDirectory()) for (const name of fs.readdirSync(at)) walk(path.join(at, name))
    }
    walk(dataDir)
    fs.chownSync(unreadable, 0, 0)
    fs.chmodSync(unreadable, 0o600)
  } else fs.chmodSync(unreadable, 0o000)
  return (...args: Array<string>) => {
    const r = spawnSync(process.execPath, [BIN, ...args], { cwd: ROOT, encoding: "utf8", timeout: 30_000, ...(root ? { uid: 65534, gid: 65534 } : {}) })
    return { code: r.status, stdout: r.stdout, stderr: r.stderr, output: r.stdout + r.stderr }
  }
}

describe("brain journal verify and remove: a journal that cannot be read", () => {
  beforeAll(ensureBuilt, 120_000)

  it.scopedLive("a segment the command may not read is reported as cannot read (exit 74), never corrupt; remove refuses it and leaves it whole; readable again, it verifies clean", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      fs.chmodSync(dir, 0o755)
      const s = yield* mintSessionId
      const clean = yield* mintSessionId
      yield* writeSession(dir, s, simple(5))
      yield* writeSession(dir, clean, simple(2))
      const [seg] = segmentsOf(dir, s)
      const bytes = fs.readFileSync(seg!)
      const brainAs = asService(dir, seg!)

      for (const args of [[dir], [dir, s]]) {
        const r = brainAs("journal", "verify", ...args)
        expect(r.code, r.output).toBe(74)
        expect(r.stdout).toContain(`${s}: cannot read:`)
        expect(r.stdout).toContain("EACCES")
        expect(r.output).not.toContain("corrupt")
        expect(r.output).not.toContain("remove")
      }
      const removed = brainAs("journal", "remove", dir, s)
      expect(removed.code, removed.output).toBe(74)
      expect(removed.stderr).toContain("EACCES")
      expect(removed.stderr).toContain("nothing removed")
      expect(fs.readFileSync(seg!).equals(bytes)).toBe(true)
      const dumped = brainAs("journal", "dump", dir, s)
      expect(dumped.code, dumped.output).toBe(74)
      expect(dumped.output).not.toContain("corrupt")

      fs.chmodSync(seg!, 0o644)
      const after = brainAs("journal", "verify", dir)
      expect(after.code, after.output).toBe(0)
      expect(after.stdout).toContain(`${s}: ok, 5 records`)
    }))
})

describe("brain journal verify and remove: what they say matches what the server does", () => {
  beforeAll(ensureBuilt, 120_000)

  it.scopedLive("a regular file where a session's directory would be is named as such, which the server keeps (answering not_found), and remove refuses it and leaves it", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const clean = yield* mintSessionId
      yield* writeSession(dir, clean, simple(2))
      const stray = yield* mintSessionId
      fs.writeFileSync(path.join(dir, "sessions", stray), "not mine")
      const r = brain("journal", "verify", dir)
      expect(r.code, r.output).toBe(0)
      expect(r.stdout).toContain(`${stray}: not a session: a file, not a directory`)
      expect(r.stdout).not.toContain(`${stray}: not a session: the residue`)
      const removed = brain("journal", "remove", dir, stray)
      expect(removed.code, removed.output).toBe(2)
      expect(fs.readFileSync(path.join(dir, "sessions", stray), "utf8")).toBe("not mine")
    }))

  it.scopedLive("beside a running server, verify's note on the commit log does not ask to start and stop the server", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          for (const entries of simple(3)) yield* journal.append(s, entries)
          const [seg] = segmentsOf(dir, s)
          fs.truncateSync(seg!, fs.statSync(seg!).size - 7)
          const r = brain("journal", "verify", dir)
          expect(r.code, r.output).toBe(1)
          expect(r.stdout).toContain("note: the commit log holds")
          expect(r.stdout).toContain("a server runs on this data directory")
          expect(r.stdout).not.toContain("start the server, stop it")
        }))
    }))
})
