/**
 * The data directory and session an operator command names, checked before the command reads or
 * writes anything. A mistaken path is refused in one line with an exit code of its own — never a
 * raw errno, nor another command's verdict ("corrupt", "stop the server first").
 *
 * The codes follow sysexits.h: 64 for wrong arguments (the usage, or a session argument that is
 * not a session id), 66 when what the command names is not there: no such data directory, a path
 * that is not a directory, or no such session in it.
 */
import * as fs from "node:fs"
import { Console, Data, Effect } from "effect"
import { isSessionId, type SessionId } from "../domain/Ids.js"
import { inspectDataDir, sessionDir } from "../layers/journal/DataDir.js"

export const EXIT_USAGE = 64
export const EXIT_NOT_FOUND = 66

/** A command that stops before it starts: the line to print (on stderr) and the exit code. */
export class Refused extends Data.TaggedError("Refused")<{ readonly line: string; readonly code: number }> {}

/** Prints a refusal and answers its exit code. */
export const exitOnRefusal = <E>(command: Effect.Effect<number, E | Refused>): Effect.Effect<number, Exclude<E, Refused>> =>
  Effect.catchIf(
    command,
    (e): e is Refused => e instanceof Refused,
    (r) => Effect.as(Console.error(r.line), r.code)
  ) as Effect.Effect<number, Exclude<E, Refused>>

export const sessionArg = (session: string): Effect.Effect<SessionId, Refused> =>
  isSessionId(session)
    ? Effect.succeed(session)
    : Effect.fail(new Refused({ line: `${session}: not a session id (ses_ and 26 letters and digits)`, code: EXIT_USAGE }))

export const noSuchSession = (dataDir: string, session: string) =>
  new Refused({ line: `${session}: no such session in ${dataDir}`, code: EXIT_NOT_FOUND })

/**
 * The data directory as the command may use it: "Missing" (nothing at the path), "Empty" (a
 * directory a server would take as new, so it holds nothing to check) or "Marked" (a Brain data
 * directory). A path that is not a directory is refused with 66; a directory that holds something
 * else with `foreignCode`, the command's own code for "cannot do it".
 */
export const dataDirAt = (dataDir: string, foreignCode: number): Effect.Effect<"Missing" | "Empty" | "Marked", Refused> =>
  Effect.suspend(() => {
    const state = inspectDataDir(dataDir)
    switch (state._tag) {
      case "Unusable":
        return Effect.fail(new Refused({ line: `${dataDir}: ${state.reason}`, code: EXIT_NOT_FOUND }))
      case "Foreign":
        return Effect.fail(new Refused({ line: `${dataDir}: ${state.reason}`, code: foreignCode }))
      default:
        return Effect.succeed(state._tag)
    }
  })

/** As `dataDirAt`, for a command that reads: nothing at the path is `no such data directory` (66). */
export const existingDataDir = (dataDir: string, foreignCode: number): Effect.Effect<"Empty" | "Marked", Refused> =>
  Effect.flatMap(dataDirAt(dataDir, foreignCode), (state) =>
    state === "Missing"
      ? Effect.fail(new Refused({ line: `${dataDir}: no such data directory`, code: EXIT_NOT_FOUND }))
      : Effect.succeed(state))

/** The session's directory exists in a data directory this command may use; else `no such session`. */
export const existingSession = (dataDir: string, session: SessionId, state: "Empty" | "Marked") =>
  state === "Marked" && fs.existsSync(sessionDir(dataDir, session)) ? Effect.void : Effect.fail(noSuchSession(dataDir, session))
