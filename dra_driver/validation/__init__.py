"""What a claim may ask of this driver: the rules the webhook enforces and ``plan`` applies.

Pure functions over claim specs, DeviceClasses and the published cards, shared by the
admission webhook (which refuses a claim at creation) and ``gpushare-dra plan`` (which reports
what a file would be refused for), so that both judge a claim the same way.
"""
