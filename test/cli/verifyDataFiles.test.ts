/**
 * `brain journal verify <data-dir>` checks every file a start reads, not only the journals: the
 * host registrations (`hosts/registrations.jsonl`), the commit log (`commit-log/a.log`, `b.log`)
 * and the idempotency log (`idempotency/claims.log`), each with the reader the server's start
 * uses. What a start would refuse, skip or lose is named with its file and a reason, and exits as
 * a journal's finding does: 1 a torn write, 2 damage, 74 a file that cannot be read.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Effect, Layer } from "effect"
import type { HostId, SessionId } from "../../src/domain/Ids.js"
import { connectedLine, idleLine, namedLine, registrationLine } from "../../src/layers/hosts/Registrations.js"
import * as IdempotencyFile from "../../src/layers/IdempotencyFile.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { encodeBatch } from "../../src/layers/journal/CommitLogFormat.js"
import { FileDriver, layerNode as nodeFiles, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import { framesOf } from "../support/frames.js"
import { BIN, ensureBuilt, ROOT } from "../support/server.js"

const brain = (...args: Array<string>) => {
  const r = spawnSync(process.execPath, [BIN, ...args], { cwd: ROOT, encoding: "utf8", timeout: 60_000, killSignal: "SIGKILL" })
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, output: r.stdout + r.stderr }
}

const HOST = "host_01m985qz0000000000000000aa" as HostId
const OTHER = "host_01m985qz0000000000000000bb" as HostId
const REGISTRATIONS = "hosts/registrations.jsonl"
const CLAIMS = "idempotency/claims.log"

let base: string
const dirs: Array<string> = []

/** A copy of the clean data directory, to damage one file of. */
const copy = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-verify-files-"))
  dirs.push(dir)
  fs.cpSync(base, dir, { recursive: true })
  return dir
}

/** Replaces a file by a directory: reading it fails EISDIR (these tests may run as root, past modes). */
const unreadable = (file: string) => {
  fs.rmSync(file)
  fs.mkdirSync(file)
}

describe("brain journal verify: the registrations, the commit log and the idempotency log", () => {
  beforeAll(async () => {
    ensureBuilt()
    base = fs.mkdtempSync(path.join(os.tmpdir(), "brain-verify-files-"))
    dirs.push(base)
    // A session written durably (and a commit log sized ahead, emptied), as `brain demo` leaves them.
    expect(brain("demo", base).code).toBe(0)
    const session = fs.readdirSync(path.join(base, "sessions"))[0]! as SessionId
    fs.mkdirSync(path.join(base, "hosts"))
    fs.writeFileSync(
      path.join(base, REGISTRATIONS),
      [
        registrationLine(HOST, Buffer.alloc(32, 1), 1),
        connectedLine(HOST, 2),
        namedLine(HOST, session, 3),
        registrationLine(OTHER, Buffer.alloc(32, 2), 4),
        idleLine(HOST, 5)
      ].map((l) => `${l}\n`).join("")
    )
    // Keyed requests' claims and answers, written by the server's own store.
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      yield* JournalFile.make({ dataDir: base }).pipe(Effect.provide(nodeFiles))
      const store = yield* IdempotencyFile.make({ dataDir: base, retentionMs: 60_000 }).pipe(Effect.provide(Layer.succeed(FileDriver, nodeDriver)))
      for (const k of ["a", "b", "c"]) {
        yield* store.claim("s", k, `h-${k}`)
        yield* store.complete("s", k, { status: 200, headers: {}, body: `answer ${k}` })
      }
    })))
  }, 120_000)
  afterAll(() => {
    for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true })
  })

  it("a clean data directory verifies clean, each of these files said ok", () => {
    const r = brain("journal", "verify", base)
    expect(r.code, r.output).toBe(0)
    expect(r.stdout).toContain(`${REGISTRATIONS}: ok, 2 registration(s) standing in 5 line(s)`)
    expect(r.stdout).toContain("commit-log/a.log: ok")
    expect(r.stdout).toContain("commit-log/b.log: ok")
    expect(r.stdout).toContain(`${CLAIMS}: ok, 6 records`)
    expect(r.stdout).toMatch(/verified 1 session\(s\), .*: clean\n$/)
  })

  it("a registrations line that is not JSON (a torn write, or damage) is named by its line and exits 1; one of no known shape (a registration whose token digest is damaged) exits 2; the file is left as found", () => {
    const original = fs.readFileSync(path.join(base, REGISTRATIONS), "utf8").split("\n")
    const cases: Array<[string, Array<string>, number, string]> = [
      ["a line cut in the middle", [original[0]!, original[1]!.slice(0, 20), ...original.slice(2)], 1, "line 2: not JSON"],
      ["a torn last line", [...original.slice(0, 4), original[4]!.slice(0, 15)], 1, "line 5: not JSON"],
      ["a damaged token digest", [original[0]!.replace(/"token_sha256":"0/, "\"token_sha256\":\"x"), ...original.slice(1)], 2, "line 1: of no known shape"]
    ]
    for (const [name, lines, code, says] of cases) {
      const dir = copy()
      const file = path.join(dir, REGISTRATIONS)
      fs.writeFileSync(file, lines.join("\n"))
      const before = fs.readFileSync(file)
      const r = brain("journal", "verify", dir)
      expect(r.code, `${name}: ${r.output}`).toBe(code)
      expect(r.stdout, name).toContain(`${REGISTRATIONS}: ${says}`)
      expect(fs.readFileSync(file).equals(before), name).toBe(true)
    }
  })

  it("a commit log whose first batch header is cut short or garbled is named and exits 1; one whose batch names a file that is not a journal segment (which a start refuses) exits 2", () => {
    const garbled = Buffer.alloc(4096)
    garbled.write("not a batch header at all, only bytes", 0)
    const foreign = encodeBatch({ epoch: 1, salt: 12345 }, [{ path: Buffer.from("format"), position: 0, pieces: [Buffer.from("x")] }])
    const cases: Array<[string, string, Buffer, number, string]> = [
      ["a header cut short", "a.log", foreign.subarray(0, 10), 1, "commit-log/a.log: its first batch is not whole"],
      ["a garbled header", "b.log", garbled, 1, "commit-log/b.log: its first batch is not whole"],
      ["a batch naming a file that is not a segment", "a.log", foreign, 2, "commit-log/a.log: corrupt: it names \"format\", which is not a journal segment"]
    ]
    for (const [name, log, bytes, code, says] of cases) {
      const dir = copy()
      const file = path.join(dir, "commit-log", log)
      fs.writeFileSync(file, bytes)
      const r = brain("journal", "verify", dir)
      expect(r.code, `${name}: ${r.output}`).toBe(code)
      expect(r.stdout, name).toContain(says)
      expect(fs.readFileSync(file).equals(bytes), name).toBe(true)
    }
  })

  it("the idempotency log's first frame header cut short exits 1, garbled exits 2, naming the file", () => {
    const original = fs.readFileSync(path.join(base, CLAIMS))
    const frames = framesOf(original)
    const cut = original.subarray(0, frames[5]!.start + 5)
    const garbled = Buffer.from(original)
    garbled.write("garbage!", 0)
    for (const [name, bytes, code, says] of [
      ["a header cut short", cut, 1, `${CLAIMS}: torn final write`],
      ["a garbled header", garbled, 2, `${CLAIMS}: corrupt at offset 0`]
    ] as const) {
      const dir = copy()
      fs.writeFileSync(path.join(dir, CLAIMS), bytes)
      const r = brain("journal", "verify", dir)
      expect(r.code, `${name}: ${r.output}`).toBe(code)
      expect(r.stdout, name).toContain(says)
    }
  })

  it("any of these files that cannot be read (a directory in its place: EISDIR) is named as not read and exits 74, never called clean", () => {
    for (const [file, says] of [
      [REGISTRATIONS, "registrations.jsonl cannot be read (EISDIR)"],
      ["commit-log/a.log", "commit-log/a.log: cannot read"],
      ["commit-log/b.log", "commit-log/b.log: cannot read"],
      [CLAIMS, `${CLAIMS}: cannot read`]
    ]) {
      const dir = copy()
      unreadable(path.join(dir, file!))
      const r = brain("journal", "verify", dir)
      expect(r.code, `${file}: ${r.output}`).toBe(74)
      expect(r.stdout, file).toContain(says)
      expect(r.stdout, file).toContain("EISDIR")
      expect(r.stdout, file).not.toMatch(/: clean\n$/)
    }
  })

  it("a session named alone is checked alone: none of these files is read", () => {
    const dir = copy()
    unreadable(path.join(dir, REGISTRATIONS))
    const session = fs.readdirSync(path.join(dir, "sessions"))[0]!
    const r = brain("journal", "verify", dir, session)
    expect(r.code, r.output).toBe(0)
    expect(r.stdout).not.toContain(REGISTRATIONS)
    expect(r.stdout).not.toContain("commit-log/")
  })
})
