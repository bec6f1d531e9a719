#!/usr/bin/env node
// The `brain` command as one module: dist/cli/main.js and everything it imports, bundled by
// esbuild into dist/brain.mjs (bin/brain.js runs it). Node loads one file instead of about a
// thousand: the server starts in about half the time (docs/operations.md, "Startup").
//
// - Worker threads (the sync thread, guest threads, the instrumenting thread) still load their
//   compiled modules from dist/, found from DIST_ROOT (src/DistRoot.ts), which is the same
//   directory whether it is read from dist/DistRoot.js or from this bundle in dist/: no other
//   module may resolve a file from its own `import.meta.url`, and the build checks that none does.
// - Dependencies written as CommonJS call `require`: the bundle gets one (`createRequire`).
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { build } from "esbuild"

const ROOT = fileURLToPath(new URL("..", import.meta.url))
const OUT = path.join(ROOT, "dist", "brain.mjs")

const result = await build({
  entryPoints: [path.join(ROOT, "dist", "cli", "main.js")],
  outfile: OUT,
  bundle: true,
  platform: "node",
  target: "node20",
  format: "esm",
  // Only the instrumenting thread uses Binaryen (a large module of its own): never the main thread.
  external: ["binaryen"],
  banner: { js: 'import { createRequire as __brainRequire } from "node:module"; const require = __brainRequire(import.meta.url);' },
  legalComments: "none",
  // A map beside the bundle (no comment in it, so Node never loads it unasked): the benchmark's
  // profile summary reads it to name the module each sample's function came from.
  sourcemap: "external",
  logLevel: "warning"
})
if (result.errors.length > 0) process.exit(1)

// Every `import.meta.url` left in the bundle resolves against the bundle's own place: only
// DistRoot's may (and the banner's `require`, which resolves packages, not files).
const text = fs.readFileSync(OUT, "utf8")
const uses = text.split("import.meta.url").length - 1
const expected = 4 // the banner's, and DistRoot's three (its test and its two branches)
if (uses !== expected) {
  console.error(`scripts/bundle.js: ${uses} uses of import.meta.url in ${OUT}, expected ${expected}: a module resolves a file from its own place, which the bundle moves`)
  process.exit(1)
}
