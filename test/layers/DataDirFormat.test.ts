/**
 * The data directory's format marker across builds (DESIGN §2; docs/operations.md, "Upgrades and
 * rollbacks"). Every build up to 2026-12-06 wrote `brain-ts/1`, though a directory this build has
 * written holds what the older ones misread (journal-only idempotency claims, the commit log): so
 * this build opens a `brain-ts/1` directory and re-marks it `brain-ts/2` before it writes anything
 * else, and an older build, which reads only `brain-ts/1`, refuses it at start. A marker this build
 * does not know (a newer build's) is refused the same way, with nothing changed.
 *
 * The marker's writes are watched through a pass-through `node:fs` (every call still reaches the
 * real file system) so the test can say in what order they reach it.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { vi } from "vitest"
import { Effect, Either } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { DataDirError, FORMAT, inspectDataDir, openDataDir, READ_FORMATS } from "../../src/layers/journal/DataDir.js"
import { layerNode as nodeFiles } from "../../src/layers/journal/FileDriver.js"
import type { JournalShape } from "../../src/services/Journal.js"
import { tempDir } from "../support/journals.js"

/** File-system calls that change something, with the paths they name, in the order they were made. */
const changes = vi.hoisted(() => ({ log: [] as Array<string>, fds: new Map<number, string>() }))

vi.mock("node:fs", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs")>()
  const named = (op: string, ...paths: Array<unknown>) => changes.log.push(`${op} ${paths.map(String).join(" -> ")}`)
  const watched = {
    ...actual,
    openSync: (file: fs.PathLike, ...rest: Array<unknown>) => {
      const fd = (actual.openSync as (...a: Array<unknown>) => number)(file, ...rest)
      changes.fds.set(fd, String(file))
      return fd
    },
    closeSync: (fd: number) => {
      changes.fds.delete(fd)
      return actual.closeSync(fd)
    },
    fsyncSync: (fd: number) => {
      named("fsync", changes.fds.get(fd) ?? `fd ${fd}`)
      return actual.fsyncSync(fd)
    },
    writeFileSync: (file: fs.PathOrFileDescriptor, ...rest: Array<unknown>) => {
      named("write", typeof file === "number" ? changes.fds.get(file) ?? `fd ${file}` : file)
      return (actual.writeFileSync as (...a: Array<unknown>) => void)(file, ...rest)
    },
    writeSync: (fd: number, ...rest: Array<unknown>) => {
      named("write", changes.fds.get(fd) ?? `fd ${fd}`)
      return (actual.writeSync as (...a: Array<unknown>) => number)(fd, ...rest)
    },
    renameSync: (from: fs.PathLike, to: fs.PathLike) => {
      named("rename", from, to)
      return actual.renameSync(from, to)
    },
    linkSync: (from: fs.PathLike, to: fs.PathLike) => {
      named("link", from, to)
      return actual.linkSync(from, to)
    },
    unlinkSync: (file: fs.PathLike) => {
      named("unlink", file)
      return actual.unlinkSync(file)
    },
    rmSync: (file: fs.PathLike, ...rest: Array<unknown>) => {
      named("rm", file)
      return (actual.rmSync as (...a: Array<unknown>) => void)(file, ...rest)
    },
    mkdirSync: (file: fs.PathLike, ...rest: Array<unknown>) => {
      named("mkdir", file)
      return (actual.mkdirSync as (...a: Array<unknown>) => string | undefined)(file, ...rest)
    }
  }
  return { ...watched, default: watched }
})

/** Every file under `dir` (but `skip`) with its bytes, and every directory, by relative path. */
const tree = (dir: string, skip: ReadonlyArray<string> = []): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const name of fs.readdirSync(dir, { recursive: true }).map(String).sort()) {
    if (skip.includes(name)) continue
    const at = path.join(dir, name)
    out[name] = fs.statSync(at).isDirectory() ? "<dir>" : fs.readFileSync(at).toString("base64")
  }
  return out
}

/** A directory as a 2026-12-01 … 2026-12-06 build leaves it: its marker, a session's journal, the stores beside. */
const olderBuildsDirectory = (dir: string, marker = "brain-ts/1\n") => {
  fs.writeFileSync(path.join(dir, "format"), marker)
  fs.mkdirSync(path.join(dir, "sessions", "ses_01jexample0000000000000000", "journal"), { recursive: true })
  fs.writeFileSync(path.join(dir, "sessions", "ses_01jexample0000000000000000", "journal", `${"1".padStart(20, "0")}.seg`), "frames")
  fs.mkdirSync(path.join(dir, "idempotency"))
  fs.writeFileSync(path.join(dir, "idempotency", "claims.log"), "{\"key\":\"k\"}\n")
  fs.mkdirSync(path.join(dir, "agentloops", "twins"), { recursive: true })
  fs.writeFileSync(path.join(dir, "agentloops", "twins", "abc.v3.wasm"), "twin")
}

const open = (dir: string) => Effect.scoped(openDataDir(dir, 0))

const markerOf = (dir: string) => fs.readFileSync(path.join(dir, "format"), "utf8")

describe("the data directory's format marker", () => {
  it("this build writes brain-ts/2 and reads brain-ts/1 (what every earlier build wrote) and brain-ts/2", () => {
    expect(FORMAT).toBe("brain-ts/2")
    expect([...READ_FORMATS].sort()).toEqual(["brain-ts/1", "brain-ts/2"])
  })

  it.scopedLive("a directory marked brain-ts/1 opens and is re-marked brain-ts/2 durably (temp file, fsync, rename, directory fsync) before anything else is written, and nothing else in it changes", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      olderBuildsDirectory(dir)
      const before = tree(dir, ["format"])
      changes.log.length = 0
      yield* open(dir)
      expect(markerOf(dir)).toBe("brain-ts/2\n")
      expect(tree(dir, ["format"])).toEqual(before)

      const inDir = changes.log.filter((line) => line.includes(dir)).map((line) => line.split(dir).join("<dir>"))
      const lockTaken = inDir.findIndex((line) => /^link <dir>\/lock\.\S+\.new -> <dir>\/lock$/.test(line))
      const marked = inDir.findIndex((line) => line === "write <dir>/format.tmp")
      expect(lockTaken, inDir.join("\n")).toBeGreaterThanOrEqual(0)
      expect(marked, inDir.join("\n")).toBeGreaterThan(lockTaken)
      // Between the lock and the marker only the lock attempt's own private file goes.
      expect(inDir.slice(lockTaken + 1, marked).every((line) => /^(rm|unlink) <dir>\/lock\.\S+\.new$/.test(line)), inDir.join("\n")).toBe(true)
      expect(inDir.slice(marked, marked + 4)).toEqual([
        "write <dir>/format.tmp",
        "fsync <dir>/format.tmp",
        "rename <dir>/format.tmp -> <dir>/format",
        "fsync <dir>"
      ])
    }))

  it.scopedLive("a new directory gets brain-ts/2 the same durable way; a directory marked brain-ts/2 opens and is not written again", () =>
    Effect.gen(function*() {
      const root = yield* tempDir()
      const fresh = path.join(root, "fresh")
      changes.log.length = 0
      yield* open(fresh)
      expect(markerOf(fresh)).toBe("brain-ts/2\n")
      const made = changes.log.filter((line) => line.includes(fresh)).map((line) => line.split(fresh).join("<dir>"))
      const marked = made.indexOf("write <dir>/format.tmp")
      expect(made.slice(marked, marked + 4)).toEqual([
        "write <dir>/format.tmp",
        "fsync <dir>/format.tmp",
        "rename <dir>/format.tmp -> <dir>/format",
        "fsync <dir>"
      ])

      const current = path.join(root, "current")
      fs.mkdirSync(current)
      olderBuildsDirectory(current, "brain-ts/2\n")
      const before = tree(current)
      changes.log.length = 0
      yield* open(current)
      expect(tree(current)).toEqual(before)
      expect(changes.log.filter((line) => line.includes(path.join(current, "format")))).toEqual([])
    }))

  it.scopedLive("a marker this build does not know (a newer build's brain-ts/99) is refused at start with a DataDirError naming it and the formats this build reads, and nothing in the directory changes", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      olderBuildsDirectory(dir, "brain-ts/99\n")
      const before = tree(dir)
      const refused = yield* Effect.either(open(dir))
      expect(Either.isLeft(refused)).toBe(true)
      if (Either.isRight(refused)) return
      expect(refused.left).toBeInstanceOf(DataDirError)
      expect(refused.left.reason).toContain("\"brain-ts/99\"")
      expect(refused.left.reason).toContain("brain-ts/1")
      expect(refused.left.reason).toContain("brain-ts/2")
      // No lock left, no marker written, no sessions directory made: byte for byte as found.
      expect(tree(dir)).toEqual(before)

      const inspected = inspectDataDir(dir)
      expect(inspected._tag).toBe("Foreign")
      if (inspected._tag === "Foreign") expect(inspected.reason).toBe(refused.left.reason)
      expect(tree(dir)).toEqual(before)
    }))

  it.scopedLive("inspecting (what operator commands and serve's setting check do first) takes brain-ts/1 and brain-ts/2 as data directories and writes nothing", () =>
    Effect.gen(function*() {
      const root = yield* tempDir()
      for (const marker of ["brain-ts/1\n", "brain-ts/2\n", "brain-ts/1"]) {
        const dir = fs.mkdtempSync(path.join(root, "d-"))
        olderBuildsDirectory(dir, marker)
        const before = tree(dir)
        expect(inspectDataDir(dir)).toEqual({ _tag: "Marked" })
        expect(tree(dir)).toEqual(before)
      }
    }))

  it.scopedLive("a start killed in the middle of the re-mark leaves a directory the next start opens: brain-ts/1 with a torn format.tmp, or brain-ts/2 already in place", () =>
    Effect.gen(function*() {
      const root = yield* tempDir()
      for (const [marker, tmp] of [["brain-ts/1\n", "brain-t"], ["brain-ts/1\n", ""], ["brain-ts/1\n", "brain-ts/2\n"], ["brain-ts/2\n", undefined]] as const) {
        const dir = fs.mkdtempSync(path.join(root, "d-"))
        olderBuildsDirectory(dir, marker)
        if (tmp !== undefined) fs.writeFileSync(path.join(dir, "format.tmp"), tmp)
        const before = tree(dir, ["format", "format.tmp"])
        const opened = yield* Effect.either(open(dir))
        expect(Either.isRight(opened), Either.isLeft(opened) ? opened.left.message : "").toBe(true)
        expect(markerOf(dir)).toBe("brain-ts/2\n")
        expect(fs.existsSync(path.join(dir, "format.tmp"))).toBe(false)
        expect(tree(dir, ["format"])).toEqual(before)
      }
    }))

  it.scopedLive("a session an older build wrote (marked brain-ts/1) is read whole by this build's journal, and the directory is re-marked brain-ts/2", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      const journal = <A, E>(use: (j: JournalShape) => Effect.Effect<A, E>) =>
        Effect.scoped(Effect.flatMap(JournalFile.make({ dataDir: dir }).pipe(Effect.provide(nodeFiles)), use))
      yield* journal((j) =>
        Effect.gen(function*() {
          yield* j.create(s)
          for (let i = 1; i <= 3; i++) yield* j.append(s, [entry("kv_put", { key: `k${i}`, value: i })])
        }))
      // As the older build left it: its marker.
      fs.writeFileSync(path.join(dir, "format"), "brain-ts/1\n")
      const last = yield* journal((j) => j.lastSequence(s))
      expect(last).toBe(3)
      expect(markerOf(dir)).toBe("brain-ts/2\n")
    }))
})
