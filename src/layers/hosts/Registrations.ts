/**
 * The host registry's file, `{dataDir}/hosts/registrations.jsonl` (docs/environments.md,
 * "Registering"): one JSON object a line, appended, read back whole at start. What the registry
 * (layers/HostsFile.ts) and the operator's `brain hosts` (cli/hosts.ts) both read.
 *
 * | line | written |
 * | --- | --- |
 * | `{host_id, token_sha256, registered_at_ms, sessions_recorded: true}` | a registration, fsynced before its answer |
 * | `{host_id, removed_at_ms, by?}` | a removal (`by`: `host`, `expiry`, `operator`), fsynced before it counts |
 * | `{host_id, connected_at_ms}` | a command stream opened, fsynced before its `ready` |
 * | `{host_id, idle_since_ms}` | no stream from then on: the last one closed, or the server started without knowing it closed |
 * | `{host_id, session_id, named_at_ms}` | a session names the host, fsynced before the session's first record |
 * | `{host_id, session_id, released_at_ms}` | that session was deleted |
 *
 * Reading, a torn line (a write that never answered) and a line of no known shape are skipped;
 * an append first ends a torn last line (`appendDurably`), so that it never swallows what follows;
 * lines about a host not registered (before its registration, or after its removal) are ignored,
 * and a removed host is never known again. The connection clock is folded by timestamps, not by
 * line order (a close and the next open can be appended in either order): a host whose latest
 * `connected_at_ms` is not older than its latest `idle_since_ms` had its stream open when the file
 * was last written, so its idle time is not known from the file.
 *
 * A registration line without `sessions_recorded` was written by a server that did not record the
 * sessions naming a host: any session may still need it, so it never expires by itself (an
 * operator removes it, `brain hosts remove`).
 */
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { Data, Effect } from "effect"
import { type HostId, isHostId, isSessionId, type SessionId } from "../../domain/Ids.js"
import { syncDirectory } from "../journal/FileDriver.js"

export const HOSTS_DIR = "hosts"
export const REGISTRATIONS_FILE = "registrations.jsonl"

export const registrationsFile = (dataDir: string) => path.join(dataDir, HOSTS_DIR, REGISTRATIONS_FILE)

/** Who removed a registration: the host itself (its token), the idle expiry, or an operator (`brain hosts remove`). */
export type RemovedBy = "host" | "expiry" | "operator"

/** A registration that stands, as the file tells it. */
export interface Recorded {
  readonly id: HostId
  readonly digest: Buffer
  /** Its registration line, kept as written (a compaction copies it). */
  readonly line: string
  readonly registeredAtMs: number
  /** Whether the sessions naming it are recorded (false: registered by a server that did not record them). */
  readonly sessionsRecorded: boolean
  /** The latest time a stream of it opened; undefined: never. */
  connectedAtMs: number | undefined
  /** The latest time it was recorded idle (no stream from then on); undefined: never. */
  idleSinceMs: number | undefined
  /** Sessions recorded as naming it and not recorded deleted, with when each named it. */
  readonly sessions: Map<SessionId, number>
}

/**
 * Since when the file shows `host` without a command stream: its last recorded idle time, or its
 * registration when it never connected and nothing later is recorded. Undefined when its stream
 * was open when the file was last written (the server stopped or crashed with it open).
 */
export const idleSince = (host: Recorded): number | undefined => {
  if (host.connectedAtMs === undefined) return host.idleSinceMs ?? host.registeredAtMs
  return host.idleSinceMs !== undefined && host.idleSinceMs > host.connectedAtMs ? host.idleSinceMs : undefined
}

export const registrationLine = (host: HostId, digest: Buffer, atMs: number) =>
  JSON.stringify({ host_id: host, token_sha256: digest.toString("hex"), registered_at_ms: atMs, sessions_recorded: true })
export const removalLine = (host: HostId, atMs: number, by: RemovedBy) => JSON.stringify({ host_id: host, removed_at_ms: atMs, by })
export const connectedLine = (host: HostId, atMs: number) => JSON.stringify({ host_id: host, connected_at_ms: atMs })
export const idleLine = (host: HostId, atMs: number) => JSON.stringify({ host_id: host, idle_since_ms: atMs })
export const namedLine = (host: HostId, session: SessionId, atMs: number) => JSON.stringify({ host_id: host, session_id: session, named_at_ms: atMs })
export const releasedLine = (host: HostId, session: SessionId, atMs: number) =>
  JSON.stringify({ host_id: host, session_id: session, released_at_ms: atMs })

interface Line {
  readonly host_id?: unknown
  readonly token_sha256?: unknown
  readonly registered_at_ms?: unknown
  readonly sessions_recorded?: unknown
  readonly removed_at_ms?: unknown
  readonly connected_at_ms?: unknown
  readonly idle_since_ms?: unknown
  readonly session_id?: unknown
  readonly named_at_ms?: unknown
  readonly released_at_ms?: unknown
}

const isTime = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v)
const later = (a: number | undefined, b: number) => (a === undefined || b > a ? b : a)

/** What a line is, by its fields (the first that fits); undefined: a line of no known shape. */
type Shape = "removal" | "registration" | "connected" | "idle" | "named" | "released"

const shapeOf = (r: Line | null): Shape | undefined => {
  if (r === null || typeof r !== "object" || !isHostId(r.host_id)) return undefined
  if (isTime(r.removed_at_ms)) return "removal"
  if (typeof r.token_sha256 === "string" && /^[0-9a-f]{64}$/.test(r.token_sha256)) return "registration"
  if (isTime(r.connected_at_ms)) return "connected"
  if (isTime(r.idle_since_ms)) return "idle"
  if (isSessionId(r.session_id) && isTime(r.named_at_ms)) return "named"
  if (isSessionId(r.session_id) && isTime(r.released_at_ms)) return "released"
  return undefined
}

/**
 * A line the fold skipped as no reader takes it (the operator's `brain journal verify` names them):
 * its number in the file (from 1), and whether it is not JSON (a torn write, or damage) or JSON of
 * no known shape (damage: no write leaves it).
 */
export interface SkippedLine {
  readonly line: number
  readonly why: "not JSON" | "of no known shape"
}

/** The registrations that stand in `text`, in registration order, how many lines it has, and the lines skipped. */
export const foldRegistrations = (text: string) => {
  const standing = new Map<HostId, Recorded>()
  const removed = new Set<string>()
  const skipped: Array<SkippedLine> = []
  let lines = 0
  for (const [at, line] of text.split("\n").entries()) {
    if (line.trim() === "") continue
    lines++
    let r: Line | null
    try {
      r = JSON.parse(line) as Line | null
    } catch {
      // A torn line: its write never answered.
      skipped.push({ line: at + 1, why: "not JSON" })
      continue
    }
    const shape = shapeOf(r)
    if (shape === undefined) {
      skipped.push({ line: at + 1, why: "of no known shape" })
      continue
    }
    const l = r as Line
    const id = l.host_id as HostId
    if (shape === "removal") {
      standing.delete(id)
      removed.add(id)
      continue
    }
    if (shape === "registration") {
      if (removed.has(id) || standing.has(id)) continue
      standing.set(id, {
        id,
        digest: Buffer.from(l.token_sha256 as string, "hex"),
        line,
        registeredAtMs: isTime(l.registered_at_ms) ? l.registered_at_ms : 0,
        sessionsRecorded: l.sessions_recorded === true,
        connectedAtMs: undefined,
        idleSinceMs: undefined,
        sessions: new Map()
      })
      continue
    }
    const host = standing.get(id)
    if (host === undefined) continue
    if (shape === "connected") host.connectedAtMs = later(host.connectedAtMs, l.connected_at_ms as number)
    else if (shape === "idle") host.idleSinceMs = later(host.idleSinceMs, l.idle_since_ms as number)
    else if (shape === "named") host.sessions.set(l.session_id as SessionId, l.named_at_ms as number)
    else host.sessions.delete(l.session_id as SessionId)
  }
  return { standing, lines, skipped }
}

/**
 * The registrations file exists but cannot be read (EACCES, EIO, EISDIR, EMFILE, …). Never read as
 * empty: a start would forget every host, and a compaction would rewrite the file with nothing.
 */
export class RegistrationsUnreadable extends Data.TaggedError("RegistrationsUnreadable")<{
  readonly file: string
  readonly code: string
}> {
  override get message() {
    return `${this.file} cannot be read (${this.code}): the host registrations are kept there; give the server's user read and write access to it, or move it away to forget every host`
  }
}

/** The file read and folded; a missing file holds nothing, one that cannot be read fails. */
export const readRegistrations = (file: string) =>
  Effect.map(
    Effect.tryPromise({
      try: () =>
        fs.readFile(file, "utf8").catch((e: NodeJS.ErrnoException) => {
          if (e.code === "ENOENT") return ""
          throw e
        }),
      catch: (e) => new RegistrationsUnreadable({ file, code: (e as NodeJS.ErrnoException).code ?? String(e) })
    }),
    foldRegistrations
  )

/** The lines that say exactly what `host` is now (a compaction writes these). */
export const linesOf = (host: Recorded): Array<string> => [
  host.line,
  ...(host.connectedAtMs !== undefined ? [connectedLine(host.id, host.connectedAtMs)] : []),
  ...(host.idleSinceMs !== undefined ? [idleLine(host.id, host.idleSinceMs)] : []),
  ...[...host.sessions].map(([s, at]) => namedLine(host.id, s, at))
]

/** Replaces the file with `lines`: a new file, synced, renamed over the old, the directory synced. */
export const rewriteDurably = async (file: string, lines: ReadonlyArray<string>) => {
  const next = `${file}.next`
  const handle = await fs.open(next, "w", 0o600)
  try {
    await handle.writeFile(lines.map((l) => `${l}\n`).join(""))
    await handle.sync()
  } finally {
    await handle.close()
  }
  await fs.rename(next, file)
  await syncDirectory(path.dirname(file))
}

/**
 * Appends lines and makes them durable (the directory too, the first time). A file whose last line
 * has no end (a write a crash or a full disk cut off) has it ended first, in the same write: the
 * torn line stays one no reader takes, and the lines appended after it are read as written, never
 * glued to it and skipped with it.
 */
export const appendDurably = async (file: string, lines: ReadonlyArray<string>) => {
  const dir = path.dirname(file)
  const created = await fs.mkdir(dir, { recursive: true })
  const handle = await fs.open(file, "a+", 0o600)
  try {
    const torn = await endsTorn(handle)
    await handle.appendFile(`${torn ? "\n" : ""}${lines.map((l) => `${l}\n`).join("")}`)
    await handle.sync()
  } finally {
    await handle.close()
  }
  if (created !== undefined) await syncDirectory(dir)
}

/** Whether the file's last byte is not the end of a line (an empty file is not torn). */
const endsTorn = async (handle: fs.FileHandle): Promise<boolean> => {
  const { size } = await handle.stat()
  if (size === 0) return false
  const last = Buffer.alloc(1)
  const { bytesRead } = await handle.read(last, 0, 1, size - 1)
  return bytesRead === 1 && last[0] !== 0x0a
}
