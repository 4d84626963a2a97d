"""The scripts behind ``python -m ozlinalg``'s commands and the benchmark commands: the
top layer, above the public face they use (``import ozlinalg``).

===================  ===========================================================
``launcher``         ``run``: a program with routing installed before it starts
``dask_cluster``     ``compare --dask N`` / ``solve --dask N``: on a local cluster
``local_cluster``    that cluster (``distributed.LocalCluster``) and its workers'
                     memory reports
``sweep``            ``accuracy``: every method and slice count against the exact
                     product
``tune``             ``tune``: the crossovers of this machine, the tuning cache
``gpu_check``        the GPU check (benchmarks/gpu/gpu_check.py): its command line,
                     parts, steps and the owed run
``gpu_parts``        its parts: environment, GPU tests, smoke check, benchmark
``gpu_report``       its report, tables and exact subset reference
``gpu_baselines``    what it times against: cuBLAS's FP64 emulation, raw INT8
``gpu_refine``       its refined-solve step
``gpu_eigen``        its ``eigh`` step
``gpu_dask``         its multi-GPU Dask step
===================  ===========================================================

Importing this package imports none of them.
"""
