// Compiled in by esbuild --define (see build.mjs).

/** The build id of this bundle: the first 16 hex digits of its SHA-256. */
declare const __BUILD_ID__: string;
/** package.json's version. */
declare const __APP_VERSION__: string;
