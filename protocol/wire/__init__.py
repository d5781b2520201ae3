"""Wire formats: the update (``update``; its ``updateheader``, with the parameters and steps it derives,
``updatecost`` caps and ``updateerrors``), signed node ``records``, ``tensorblob``, ``canonical`` JSON,
``commitments``, ``bls`` and ``keys``. No re-exports: import the module that defines a name."""
