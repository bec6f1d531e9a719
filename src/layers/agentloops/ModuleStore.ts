/**
 * Where admitted modules are kept, by content hash: `{dataDir}/agentloops/{sha256}.wasm`, written
 * atomically (a temporary file, fdatasync, rename, directory fsync), and which sessions use each:
 * an empty marker file `{dataDir}/agentloops/uses/{sha256}/{session}` written before the session's
 * creation is journaled and removed when the session is deleted. A module is removed only when no
 * session still uses it; a marker left by a create that never finished names a session with no
 * directory and is swept when the module's removal is asked for. The store does not order its
 * callers: AgentloopsModules holds one lock around each check-then-act step (admission, removal,
 * use); a write of a module already stored keeps the stored file, and each write's temporary file
 * has its own name. A removed module's instrumented
 * twin (`{dataDir}/agentloops/twins/`, kept by the WasmHost) goes with it; a twin written after
 * its module's removal (the removal raced the twin's write) and the temporary files of writes a
 * crash cut short, and twins of an older twin format (never read again), are swept at start
 * (`sweep`).
 */
import { randomUUID } from "node:crypto"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { Data, Effect, Option } from "effect"
import { syncDirectory } from "../journal/FileDriver.js"
import { overdueMarkerName, prebuiltTwinName } from "../wasm/TwinExports.js"

export class StoreFailed extends Data.TaggedError("StoreFailed")<{
  readonly reason: string
  /** Out of descriptors (EMFILE, ENFILE): nothing is wrong with the store, and the same call can succeed shortly. */
  readonly exhausted?: boolean
}> {}

export interface StoredModule {
  readonly id: string
  readonly bytes: number
}

export interface ModuleStoreShape {
  /**
   * The module's bytes; none when no such module is stored. A module that cannot be read now (EMFILE
   * at the open-file limit, EIO) is `StoreFailed`, never none: "no such module" would tell a caller
   * that an upload it made is gone.
   */
  readonly read: (id: string) => Effect.Effect<Option.Option<Uint8Array>, StoreFailed>
  /** Whether the module is stored, without reading it; `StoreFailed` when that cannot be known now. */
  readonly has: (id: string) => Effect.Effect<boolean, StoreFailed>
  readonly write: (id: string, bytes: Uint8Array) => Effect.Effect<void, StoreFailed>
  readonly remove: (id: string) => Effect.Effect<void, StoreFailed>
  readonly list: Effect.Effect<ReadonlyArray<StoredModule>, StoreFailed>
  /** Records that `session` uses the module (before its creation is journaled). */
  readonly use: (id: string, session: string) => Effect.Effect<void, StoreFailed>
  readonly unuse: (id: string, session: string) => Effect.Effect<void>
  /** The sessions recorded as using the module; fails rather than answer none when they cannot be listed. */
  readonly users: (id: string) => Effect.Effect<ReadonlyArray<string>, StoreFailed>
  /** At start, before any write: removes twins without their module or of another twin format, and temporary files. */
  readonly sweep: Effect.Effect<void, StoreFailed>
}

const ID = /^[0-9a-f]{64}$/

const storeFailed = (what: string, err: unknown) => {
  const code = (err as NodeJS.ErrnoException).code ?? "error"
  return new StoreFailed({ reason: `${what}: ${code}`, ...(code === "EMFILE" || code === "ENFILE" ? { exhausted: true } : {}) })
}

const tryFs = <A>(what: string, run: () => Promise<A>) => Effect.tryPromise({ try: run, catch: (err) => storeFailed(what, err) })

/** `run`'s answer, or `missing` when the file does not exist (ENOENT); any other failure is `StoreFailed`. */
const unlessMissing = <A>(what: string, run: () => Promise<A>, missing: A) =>
  tryFs(what, () =>
    run().catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") return missing
      throw err
    }))

/**
 * A directory's names; one that does not exist has none. Any other failure (EMFILE at the
 * open-file limit, EACCES) is thrown: a listing that cannot be read is never "none", which would
 * let a module in use be removed, or say that the uploaded ones are gone.
 */
const namesIn = (dir: string) =>
  fs.readdir(dir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return [] as Array<string>
    throw err
  })

const syncDir = (dir: string) => tryFs("fsync of the modules directory", () => syncDirectory(dir))

export const fileStore = (dir: string): ModuleStoreShape => {
  const file = (id: string) => path.join(dir, `${id}.wasm`)
  const usesDir = (id: string) => path.join(dir, "uses", id)
  const twinsDir = path.join(dir, "twins")
  return {
    read: (id) =>
      ID.test(id)
        ? unlessMissing("reading the module", () => fs.readFile(file(id)).then((b) => Option.some<Uint8Array>(new Uint8Array(b))), Option.none())
        : Effect.succeed(Option.none()),
    has: (id) => ID.test(id) ? unlessMissing("looking for the module", () => fs.access(file(id)).then(() => true), false) : Effect.succeed(false),
    write: (id, bytes) =>
      Effect.gen(function*() {
        yield* tryFs("creating the modules directory", () => fs.mkdir(dir, { recursive: true }))
        const exists = yield* Effect.promise(() => fs.access(file(id)).then(() => true, () => false))
        if (exists) return
        // Its own name: a failed write removes only its own temporary file.
        const tmp = `${file(id)}.${process.pid}.${randomUUID()}.tmp`
        yield* tryFs("writing the module", async () => {
          const handle = await fs.open(tmp, "wx")
          try {
            await handle.writeFile(bytes)
            await handle.datasync()
          } finally {
            await handle.close()
          }
          await fs.rename(tmp, file(id))
        }).pipe(Effect.tapError(() => Effect.promise(() => fs.rm(tmp, { force: true }))))
        yield* syncDir(dir)
      }),
    remove: (id) =>
      tryFs("removing the module", () => fs.rm(file(id), { force: true })).pipe(
        // Its instrumented twin, if one was kept (wasm/InlineModules.ts): `twins/{id}.v{format}.wasm`.
        Effect.zipRight(tryFs("removing its twin", async () => {
          const names = await fs.readdir(twinsDir).catch(() => [] as Array<string>)
          for (const name of names) if (name.startsWith(`${id}.`)) await fs.rm(path.join(twinsDir, name), { force: true })
        })),
        Effect.zipRight(tryFs("removing its uses", () => fs.rm(usesDir(id), { recursive: true, force: true }))),
        Effect.zipRight(syncDir(dir))
      ),
    list: tryFs("listing the modules", async () => {
      const names = await namesIn(dir)
      const out: Array<StoredModule> = []
      for (const name of names.sort()) {
        const id = name.slice(0, -5)
        if (!name.endsWith(".wasm") || !ID.test(id)) continue
        const stat = await fs.stat(path.join(dir, name)).catch(() => undefined)
        if (stat) out.push({ id, bytes: stat.size })
      }
      return out
    }),
    use: (id, session) =>
      tryFs("recording the module's use", async () => {
        await fs.mkdir(usesDir(id), { recursive: true })
        const handle = await fs.open(path.join(usesDir(id), session), "w")
        await handle.close()
      }).pipe(Effect.zipRight(syncDir(usesDir(id)))),
    unuse: (id, session) => Effect.promise(() => fs.rm(path.join(usesDir(id), session), { force: true })),
    users: (id) => tryFs("listing the module's uses", () => namesIn(usesDir(id))),
    sweep: tryFs("sweeping the modules directory", async () => {
      const names = await fs.readdir(dir).catch(() => [] as Array<string>)
      const stored = new Set(names.filter((n) => n.endsWith(".wasm") && ID.test(n.slice(0, -5))).map((n) => n.slice(0, -5)))
      for (const name of names) if (name.endsWith(".tmp")) await fs.rm(path.join(dir, name), { force: true })
      // A twin is named by its module's id and the twin format (`{id}.v{format}.wasm`,
      // wasm/TwinExports.ts), as is the mark of one that took past its deadline (`{id}.v{format}.overdue`):
      // one of another format is never read again.
      for (const name of await fs.readdir(twinsDir).catch(() => [] as Array<string>)) {
        const id = name.slice(0, name.indexOf("."))
        if (!stored.has(id) || (name !== prebuiltTwinName(id) && name !== overdueMarkerName(id))) await fs.rm(path.join(twinsDir, name), { force: true })
      }
    })
  }
}

export const memoryStore = (): ModuleStoreShape => {
  const modules = new Map<string, Uint8Array>()
  const uses = new Map<string, Set<string>>()
  const usesOf = (id: string) => uses.get(id) ?? uses.set(id, new Set()).get(id)!
  return {
    read: (id) => Effect.sync(() => Option.fromNullable(modules.get(id))),
    has: (id) => Effect.sync(() => modules.has(id)),
    write: (id, bytes) => Effect.sync(() => void modules.set(id, bytes)),
    remove: (id) =>
      Effect.sync(() => {
        modules.delete(id)
        uses.delete(id)
      }),
    list: Effect.sync(() => [...modules].map(([id, b]) => ({ id, bytes: b.length })).sort((a, b) => (a.id < b.id ? -1 : 1))),
    use: (id, session) => Effect.sync(() => void usesOf(id).add(session)),
    unuse: (id, session) => Effect.sync(() => void uses.get(id)?.delete(session)),
    users: (id) => Effect.sync(() => [...(uses.get(id) ?? [])]),
    sweep: Effect.void
  }
}
