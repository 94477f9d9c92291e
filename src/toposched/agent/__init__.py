"""The node agent: publishes a node's GPU topology and serves the kubelet's device plugin API.

`toposched kube node-agent` runs it as a DaemonSet (docs/node-agent.md): `publisher` writes the
node annotation the scheduler reads, `plugin` hands each container the GPUs the scheduler chose
(`podmatch` finds the pod a kubelet request is for), `health` watches the GPUs through NVML.
"""
