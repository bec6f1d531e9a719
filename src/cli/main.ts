/**
 * The `brain` command line: the program's entry point.
 */
import { Console, Effect } from "effect"
import { demo } from "./demo.js"
import { dump, verify } from "./journal.js"

const USAGE = `usage:
  brain journal verify <data-dir> [session]   check journals; exit 0 clean, 1 torn final write, 2 corrupt
  brain journal dump <data-dir> <session>     print a session's records as JSON lines
  brain demo [data-dir]                       write a demo session durably, then verify the data directory`

const main = (argv: ReadonlyArray<string>): Effect.Effect<number, unknown> => {
  const [group, command, ...rest] = argv
  if (group === "journal" && command === "verify" && rest.length >= 1 && rest.length <= 2) {
    return verify(rest[0]!, rest[1])
  }
  if (group === "journal" && command === "dump" && rest.length === 2) return dump(rest[0]!, rest[1]!)
  if (group === "demo" && argv.length <= 2) return demo(command ?? "./brain-data")
  return Effect.as(Console.error(USAGE), 64)
}

Effect.runPromise(main(process.argv.slice(2))).then(
  (code) => {
    process.exitCode = code
  },
  (err) => {
    console.error(err)
    process.exitCode = 70
  }
)
