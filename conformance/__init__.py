"""Real RocketMQ as the reference: brokers and clients from Maven Central beside the model.

``jars`` resolves a RocketMQ release's jars with Maven, ``driver`` compiles the Java client driver
against them, ``cluster`` runs a name server and brokers as ``java`` processes on 127.0.0.1,
``plan`` turns a scenario (and the model's run of it) into what the real clients play,
``observed`` turns what they saw into contract tables, ``compare`` judges the audit and the model
against them, and ``run`` puts it together into ``report.json``.
"""
