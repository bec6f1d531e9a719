/**
 * The Node flags the server runs with, and is measured with (docs/operations.md, "Running";
 * docs/benchmarks.md): a larger young generation (`--max-semi-space-size`, MiB), so that the many
 * short-lived objects of a turn cost less garbage collection. `npm start` (scripts/start.js) passes
 * them; the first line of bin/brain.js gives them to `./bin/brain.js` and `npx brain` (a test
 * checks it names them all). V8 reads them only as the process starts, and Node cannot replace
 * its process with another (no exec): `node bin/brain.js serve` runs without them, and says so.
 */
export const SERVER_NODE_FLAGS = ["--max-semi-space-size=32"] as const

/** A flag's name, as V8 reads it (`_` and `-` alike), without its value. */
const nameOf = (flag: string) => flag.replace(/=.*$/, "").replace(/_/g, "-")

/**
 * The SERVER_NODE_FLAGS this process runs without: none of the same name (whatever its value: an
 * operator's own choice stands) among its Node arguments (`process.execArgv`) or in NODE_OPTIONS.
 */
export const missingNodeFlags = (execArgv: ReadonlyArray<string>, nodeOptions: string | undefined): Array<string> => {
  const given = new Set([...execArgv, ...(nodeOptions ?? "").split(/\s+/)].filter((a) => a.startsWith("--")).map(nameOf))
  return SERVER_NODE_FLAGS.filter((flag) => !given.has(nameOf(flag)))
}

/** The warning a server started without some of them logs, naming them and how to give them. */
export const missingNodeFlagsWarning = (missing: ReadonlyArray<string>) =>
  `the server runs without the Node flag(s) ${missing.join(" ")}, which \`npm start\` and bin/brain.js's first line give it ` +
  `(a larger young generation: less garbage collection per turn; docs/operations.md, "Running"): ` +
  `start it with \`npm start\`, \`npx brain serve\`, \`./bin/brain.js serve\`, or \`node ${missing.join(" ")} bin/brain.js serve\``
