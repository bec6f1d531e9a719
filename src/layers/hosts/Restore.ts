/**
 * The registry's hosts as its file leaves them at start (hosts/Registrations.ts has the lines):
 * the registrations that stand, each idle since what the file says.
 *
 * - A host whose stream was open when the server stopped (or whose close was never written)
 *   counts as connected until this start, which is recorded, so that a restart moves its clock
 *   once and never again.
 * - A file with more lines than it needs (SPARE_LINES past what stands) is rewritten with only
 *   what stands: a new file, synced, then renamed over the old. Nothing appends meanwhile: the
 *   registry is not built yet (while it runs, hosts/Compaction.ts rewrites holding its appends).
 */
import { type Clock, Effect } from "effect"
import type { Host } from "./Host.js"
import {
  appendDurably,
  idleLine,
  idleSince,
  linesOf,
  readRegistrations,
  type RegistrationsUnreadable,
  rewriteDurably
} from "./Registrations.js"

/** Lines past what the standing registrations need before the file is rewritten at start. */
const SPARE_LINES = 64

/**
 * The registrations standing in `file`, their idle times settled and the file compacted (both best
 * effort, logged). A file that cannot be read fails the start: the registry never starts empty
 * beside registrations it could not read.
 */
export const restoreHosts = (file: string, clock: Clock.Clock): Effect.Effect<Map<string, Host>, RegistrationsUnreadable> =>
  Effect.gen(function*() {
    const hosts = new Map<string, Host>()
    const { lines, standing } = yield* readRegistrations(file)
    const startedAt = clock.unsafeCurrentTimeMillis()
    // A host whose stream was open when the server stopped, or whose close was never written,
    // counts as connected until now; recorded, so that the next start does not move it again.
    const settled: Array<string> = []
    for (const [id, r] of standing) {
      const since = idleSince(r)
      if (since === undefined) {
        r.idleSinceMs = startedAt
        settled.push(idleLine(id, startedAt))
      }
      hosts.set(id, {
        id,
        digest: r.digest,
        connection: undefined,
        calls: new Map(),
        idleSinceMs: since ?? startedAt,
        sessions: new Set(r.sessions.keys()),
        sessionsRecorded: r.sessionsRecorded
      })
    }
    const compacted = [...standing.values()].flatMap(linesOf)
    // Nothing appends meanwhile (the registry is not built yet). A failure keeps the old file, which reads
    // the same but for what `settled` adds (appended instead).
    const rewritten = lines > compacted.length + SPARE_LINES &&
      (yield* Effect.tryPromise(() => rewriteDurably(file, compacted)).pipe(
        Effect.as(true),
        Effect.catchAll((e) => Effect.as(Effect.logWarning(`the host registrations file was not compacted: ${String(e.error)}`), false))
      ))
    if (!rewritten && settled.length > 0) {
      // Not written, the next start counts these hosts as connected until then: later, never sooner.
      yield* Effect.tryPromise(() => appendDurably(file, settled)).pipe(
        Effect.catchAll((e) => Effect.logWarning(`the host registrations' idle times were not recorded: ${String(e.error)}`))
      )
    }
    return hosts
  })
