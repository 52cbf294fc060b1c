"""The shipped workloads (``workload=resnet18|gpt|mlp|jpeg``): examples of the Workload
protocol, and the reference workload of seed 004 (ResNet-18 on CIFAR-10-sized images)."""
