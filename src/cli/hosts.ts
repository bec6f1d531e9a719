/**
 * `brain hosts list|remove`: the operator's view of the host registrations
 * (`{data-dir}/hosts/registrations.jsonl`; docs/environments.md, "Registering").
 *
 * - `list` reads the file as the server would at start and never writes: it runs beside a server
 *   (what a running server has done since its last write is not shown). Each registration: its
 *   id, when it registered, when it was last connected, since when it has been idle, and the
 *   sessions naming it that still exist — never a token (the file holds only their digests, and
 *   they are not shown either).
 * - `remove` takes the data directory's lock, so it refuses to run beside a server (whose
 *   registry in memory would not see the removal): with the server stopped, it appends a removal
 *   (`by: "operator"`) for each host named, fsynced, as the host's own removal would, and reads the
 *   file back to see them gone. Every id is checked first: one that is not a registration that
 *   stands refuses them all.
 *
 * Exit 0 done, 1 refused (the server runs, or the file cannot be written), 64 wrong arguments,
 * 66 no such data directory or registration (cli/dataDir.ts), 74 the file cannot be read (nothing
 * listed as if it held nothing, nothing removed).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Clock, Console, Effect, Either } from "effect"
import { type HostId, isHostId } from "../domain/Ids.js"
import { MAX_HOSTS } from "../domain/Limits.js"
import {
  appendDurably,
  HOSTS_DIR,
  idleSince,
  readRegistrations,
  type Recorded,
  registrationsFile,
  REGISTRATIONS_FILE,
  removalLine
} from "../layers/hosts/Registrations.js"
import { acquireLock, sessionDir } from "../layers/journal/DataDir.js"
import { EXIT_NOT_FOUND, EXIT_USAGE, existingDataDir, exitOnRefusal, Refused } from "./dataDir.js"

export const HOSTS_OK = 0
export const HOSTS_FAILED = 1
export const HOSTS_UNREADABLE = 74

const FILE = `${HOSTS_DIR}/${REGISTRATIONS_FILE}`
const at = (ms: number) => new Date(ms).toISOString()

/** The file read as a start reads it; one that cannot be read refuses the command (exit 74). */
const read = (file: string) =>
  Effect.mapError(readRegistrations(file), (e) => new Refused({ line: e.message, code: HOSTS_UNREADABLE }))

/** The sessions recorded as naming `host` whose journal is still there, in id order. */
const namingSessions = (dataDir: string, host: Recorded) =>
  [...host.sessions.keys()].filter((s) => fs.existsSync(sessionDir(dataDir, s))).sort()

/** One registration as a line: never its token or the token's digest. */
const describeHost = (dataDir: string, host: Recorded) => {
  const idle = idleSince(host)
  const connection = host.connectedAtMs === undefined
    ? "never connected"
    : idle === undefined
    ? `connected since ${at(host.connectedAtMs)} (its command stream was open when last recorded)`
    : `last connected until ${at(idle)}`
  const idleness = idle === undefined ? "" : `; idle since ${at(idle)}`
  let named: string
  if (!host.sessionsRecorded) {
    named = "sessions naming it not recorded (registered by an older server): it does not expire by itself"
  } else {
    const sessions = namingSessions(dataDir, host)
    named = sessions.length === 0 ? "named by no session" : `named by ${sessions.length} session(s): ${sessions.join(", ")}`
  }
  return `${host.id}: registered ${at(host.registeredAtMs)}; ${connection}${idleness}; ${named}`
}

export const list = (dataDirArg: string): Effect.Effect<number> => {
  const dataDir = path.resolve(dataDirArg)
  return exitOnRefusal(Effect.gen(function*() {
    const state = yield* existingDataDir(dataDir, HOSTS_FAILED)
    const { standing } = state === "Empty" ? { standing: new Map<HostId, Recorded>() } : yield* read(registrationsFile(dataDir))
    for (const host of standing.values()) yield* Console.log(describeHost(dataDir, host))
    yield* Console.log(`${standing.size} host registration(s) in ${FILE} (a server keeps at most ${MAX_HOSTS})`)
    return HOSTS_OK
  }))
}

export const remove = (dataDirArg: string, ids: ReadonlyArray<string>): Effect.Effect<number> => {
  const dataDir = path.resolve(dataDirArg)
  return exitOnRefusal(Effect.scoped(Effect.gen(function*() {
    const bad = ids.find((id) => !isHostId(id))
    if (bad !== undefined) return yield* Effect.fail(new Refused({ line: `${bad}: not a host id (host_ and 26 letters and digits)`, code: EXIT_USAGE }))
    const state = yield* existingDataDir(dataDir, HOSTS_FAILED)
    const noSuchHost = (id: string) => new Refused({ line: `${id}: no such host registration in ${dataDir}`, code: EXIT_NOT_FOUND })
    if (state === "Empty") return yield* Effect.fail(noSuchHost(ids[0]!))
    const locked = yield* Effect.either(acquireLock(dataDir, 0))
    if (Either.isLeft(locked)) {
      yield* Console.error(`${dataDir}: ${locked.left.reason}${locked.left.held ? "; stop the server before removing a host registration" : ""}`)
      return HOSTS_FAILED
    }
    const file = registrationsFile(dataDir)
    const { standing } = yield* read(file)
    const missing = ids.find((id) => !standing.has(id as HostId))
    if (missing !== undefined) return yield* Effect.fail(noSuchHost(missing))
    const now = yield* Clock.currentTimeMillis
    const written = yield* Effect.either(Effect.tryPromise(() => appendDurably(file, [...new Set(ids)].map((id) => removalLine(id as HostId, now, "operator")))))
    if (Either.isLeft(written)) {
      yield* Console.error(`${FILE}: the removal could not be written: ${(written.left.error as NodeJS.ErrnoException).code ?? String(written.left.error)}; nothing was removed`)
      return HOSTS_FAILED
    }
    // Read back as a server's start would read it: a removal is said done only once the file says so.
    const after = (yield* read(file)).standing
    const standingStill = ids.filter((id) => after.has(id as HostId))
    if (standingStill.length > 0) {
      yield* Console.error(`${FILE}: the removal was written, but the file read back still holds ${standingStill.join(", ")}: not removed`)
      return HOSTS_FAILED
    }
    for (const id of new Set(ids)) {
      const sessions = namingSessions(dataDir, standing.get(id as HostId)!)
      yield* Console.log(
        `${id}: removed${sessions.length > 0 ? `; ${sessions.length} session(s) name it, whose calls of its tools now fail host_unknown (not sent)` : ""}`
      )
    }
    return HOSTS_OK
  })))
}
