"""Wire formats: the update (``update``, its ``updateheader``, ``updatecost`` caps, ``updateparams`` and
``updateerrors``), signed node ``records``, ``tensorblob``, ``canonical`` JSON, ``commitments``, ``bls`` and
``keys``. No re-exports: import the module that defines a name."""
