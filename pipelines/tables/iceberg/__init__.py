"""The Apache Iceberg table store (pyiceberg, SQL catalog): the store itself, its catalog, the marks kept as table
properties, its data files, its schemas, its transaction and its errors cut to one line."""
