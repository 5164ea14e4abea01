// CBORValue and CBORMapEntry appear in the public API (COSE keys, iOS 27 extensions): re-export them so that
// `import AppAttest` is enough to use them.
@_exported public import AppAttestCBOR
