/**
 * The `brain` command line: the program's entry point.
 */
import { Console, Effect, Logger, RuntimeFlags, RuntimeFlagsPatch } from "effect"
import { demo } from "./demo.js"
import * as hosts from "./hosts.js"
import { repair } from "./idempotency.js"
import { dump, remove, verify } from "./journal.js"
import { serveCommand } from "./serve.js"

const USAGE = `usage:
  brain serve [--listen host:port] [--data-dir dir] [--api-token t] [--max-model-calls n] …
                                              serve HTTP (flags mirror the BRAIN_* environment variables)
  brain journal verify <data-dir> [session]   check journals (and, for a whole directory, the idempotency log,
                                              the commit log and the host registrations);
                                              exit 0 clean, 1 torn final write, 2 corrupt, 74 cannot read
  brain journal dump <data-dir> <session>     print a session's records as JSON lines
  brain journal remove <data-dir> <session>   remove a corrupt session (the server must be stopped; refused while
                                              the commit log holds writes to it: start and stop the server first)
  brain idempotency repair <data-dir>         with the server stopped: rebuild a damaged idempotency log
                                              from its intact records; exit 0 clean or repaired, 1 not
  brain hosts list <data-dir>                 list the host registrations: id, registered, last connected, idle
                                              since, the sessions naming it (never a token); beside a server too
  brain hosts remove <data-dir> <host_id>…    with the server stopped: remove host registrations (their
                                              sessions' calls of their tools then fail host_unknown)
  brain demo [data-dir]                       write a demo session durably (default ./brain-data), then verify
                                              the data directory; exit as verify, 66 when it cannot use it
every command but serve: exit 64 on wrong arguments, 66 when the data directory (or the session)
named is not there or is not a directory`

const isHelp = (arg: string) => arg === "--help" || arg === "-h"

const main = (argv: ReadonlyArray<string>): Effect.Effect<number, unknown> => {
  const [group, command, ...rest] = argv
  // Asked for, the usage goes to stdout with 0; a wrong command line gets it on stderr with 64.
  if (argv.length === 0 || group === "help" || isHelp(group!) || (group !== "serve" && argv.some(isHelp))) {
    return argv.length === 0 ? Effect.as(Console.error(USAGE), 64) : Effect.as(Console.log(USAGE), 0)
  }
  // A flag where a directory or a session goes is a mistyped command line, not a path to create.
  if (group !== "serve" && argv.some((a) => a.startsWith("-"))) return Effect.as(Console.error(USAGE), 64)
  if (group === "journal" && command === "verify" && rest.length >= 1 && rest.length <= 2) {
    return verify(rest[0]!, rest[1])
  }
  if (group === "journal" && command === "dump" && rest.length === 2) return dump(rest[0]!, rest[1]!)
  if (group === "journal" && command === "remove" && rest.length === 2) return remove(rest[0]!, rest[1]!)
  if (group === "idempotency" && command === "repair" && rest.length === 1) return repair(rest[0]!)
  if (group === "hosts" && command === "list" && rest.length === 1) return hosts.list(rest[0]!)
  if (group === "hosts" && command === "remove" && rest.length >= 2) return hosts.remove(rest[0]!, rest.slice(1))
  if (group === "demo" && argv.length <= 2) return demo(command ?? "./brain-data")
  if (group === "serve" && argv.slice(1).some(isHelp)) return Effect.as(Console.log(USAGE), 0)
  if (group === "serve") return serveCommand(argv.slice(1))
  return Effect.as(Console.error(USAGE), 64)
}

// Logs are JSON lines when stdout is not a terminal (a supervisor or a file reads them).
const logger = process.stdout.isTTY ? Logger.pretty : Logger.json

// Signals are handled by `serve` itself (drain first, ignore repeats), so no runtime-level handler.
// Effect's own per-fiber metrics (fibers started, active, lifetimes) are kept by no one here: off.
/**
 * Exits once what was written to stdout and stderr has left the process, or after a second: a
 * write to a pipe is asynchronous, and `process.exit` drops what is still queued. (A command that
 * prints much, as `journal dump`, waits for its own writes; a server's last log lines must not keep
 * it from exiting when nobody reads them.) An empty write's callback runs after the writes queued
 * before it.
 */
const exitFlushed = (code: number) => {
  const flushed = (stream: NodeJS.WriteStream) => new Promise<void>((resolve) => stream.write("", () => resolve()))
  const exit = () => process.exit(code)
  setTimeout(exit, 1000).unref()
  void Promise.all([flushed(process.stdout), flushed(process.stderr)]).then(exit)
}

Effect.runPromise(main(process.argv.slice(2)).pipe(Effect.provide(logger), Effect.withRuntimeFlagsPatch(RuntimeFlagsPatch.disable(RuntimeFlags.RuntimeMetrics)))).then(
  exitFlushed,
  (err) => {
    console.error(err)
    exitFlushed(70)
  }
)
