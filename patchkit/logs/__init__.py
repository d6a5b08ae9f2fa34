"""A server's log as a source of facts: read in one streaming pass (``read``), or followed as
it is written (``follow``); its tracebacks (``tracebacks``) and lines matched against the
failures patchkit knows (``match``, from ``patchkit.fixes.signatures``); which SGLang wrote it
(``origin``); how far a start got (``phases``)."""
