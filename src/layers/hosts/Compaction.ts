/**
 * The host registrations file kept bounded while the server runs (hosts/Registrations.ts has the
 * lines): every stream opening, close and session naming appends a line, and a host reconnecting
 * in a loop appends hundreds a second. Once the file is larger than twice what it held after its
 * last rewrite (and at least REGISTRATIONS_COMPACT_MIN_BYTES), it is read back and rewritten with
 * only what stands, as a start does (hosts/Restore.ts): what a restart reads from it is the same.
 *
 * The registry runs it holding its appends, so that nothing is appended while the file is
 * rewritten. A failure is logged and leaves the old file, which reads the same.
 */
import * as fs from "node:fs/promises"
import { Effect } from "effect"
import { linesOf, readRegistrations, rewriteDurably } from "./Registrations.js"

/** Bytes. The registrations file is never rewritten below this while the server runs: a small file costs nothing to keep. */
export const REGISTRATIONS_COMPACT_MIN_BYTES = 64 * 1024

/** The compaction of `file`: `ifGrown` rewrites it once it has grown past its bound (run holding the registry's appends). */
export const makeCompaction = (file: string) => {
  let bound = REGISTRATIONS_COMPACT_MIN_BYTES
  const ifGrown: Effect.Effect<void> = Effect.gen(function*() {
    const size = yield* Effect.promise(() => fs.stat(file).then((s) => s.size, () => 0))
    if (size <= bound) return
    // A file that cannot be read is left as it is: read as empty, it would be rewritten with nothing.
    yield* readRegistrations(file).pipe(
      Effect.flatMap(({ standing }) => Effect.tryPromise(() => rewriteDurably(file, [...standing.values()].flatMap(linesOf)))),
      Effect.catchAll((e) =>
        Effect.logWarning(`the host registrations file was not compacted: ${e._tag === "RegistrationsUnreadable" ? e.message : String(e.error)}`)
      )
    )
    const after = yield* Effect.promise(() => fs.stat(file).then((s) => s.size, () => 0))
    bound = Math.max(REGISTRATIONS_COMPACT_MIN_BYTES, 2 * after)
  })
  return { ifGrown }
}
