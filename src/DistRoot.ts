/**
 * The build's root, `dist/`: where the worker threads' modules and the shipped guests are. The
 * same from every place this module runs: compiled into `dist/` (this file's directory), bundled
 * into `dist/brain.mjs` (scripts/bundle.js; the bundle's directory), or from `src/` under the
 * tests (its sibling `dist/`, built by `npm run build`).
 */
export const DIST_ROOT: URL = import.meta.url.endsWith(".ts") ? new URL("../dist/", import.meta.url) : new URL("./", import.meta.url)
